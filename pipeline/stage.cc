#include "pipeline/stage.h"

#include <optional>

#include "core/precision.h"
#include "core/rng.h"
#include "ops/elementwise.h"

namespace gpipe {
namespace {

class ScopedEvent {
 public:
  ScopedEvent(Tracer* t, int row, std::string name, const char* cat, int micro, int64_t step)
      : t_(t),
        row_(row),
        name_(std::move(name)),
        cat_(cat),
        micro_(micro),
        step_(static_cast<int>(step)),
        start_(t ? t->now_us() : 0) {}
  ~ScopedEvent() {
    if (t_) t_->add({name_, cat_, row_, start_, t_->now_us() - start_, micro_, step_});
  }

 private:
  Tracer* t_;
  int row_;
  std::string name_;
  const char* cat_;
  int micro_, step_;
  double start_;
};

}  // namespace

Stage::Stage(int index, LayerList layers, int64_t first_layer, Device device,
             std::shared_ptr<Loss> loss, SkipRoutes routes)
    : index_(index),
      layers_(std::move(layers)),
      first_layer_(first_layer),
      device_(device),
      loss_(std::move(loss)),
      routes_(std::move(routes)) {
  for (const auto& l : layers_) differentiable_ = differentiable_ || !l->parameters().empty();
}

Bundle Stage::run(int m, const Bundle& x, const std::map<int, Bundle>& skips_in,
                  const StepContext& ctx, std::map<int, Bundle>* skips_out,
                  std::optional<LinearHead>* head) {
  // (Note [Skips]) What arrives is put in the store the layers pop from;
  // what is left in it after the last layer leaves for later cells.
  const size_t routed = routes_.in_bundle.size();
  GPIPE_ASSERT(x.size() >= routed, "stage ", index_, ": a message of ", x.size(),
               " tensors cannot carry its ", routed, " routed skips");
  const size_t n = x.size() - routed;
  SkipStore store;
  const std::string who = detail::concat("stage ", index_);
  for (size_t i = 0; i < routed; ++i) store.stash(routes_.in_bundle[i], x[n + i], who);
  for (const auto& [peer, names] : routes_.from) {
    auto it = skips_in.find(peer);
    GPIPE_ASSERT(it != skips_in.end() && it->second.size() == names.size(), "stage ", index_,
                 ": micro-batch ", m, "'s skips from stage ", peer, " are missing");
    for (size_t i = 0; i < names.size(); ++i) store.stash(names[i], it->second[i], who);
  }
  Bundle h(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
  {
    SkipScope scope(&store);
    for (size_t i = 0; i < layers_.size(); ++i) {
      // Note [Remat RNG]: the key names the work (seed, step, micro-batch, layer).
      RngScope rng({ctx.seed, static_cast<uint64_t>(ctx.step),
                    static_cast<uint64_t>(m + ctx.micro_batch_offset),
                    static_cast<uint64_t>(first_layer_ + static_cast<int64_t>(i))});
      DecodeScope decode(ctx.decode, first_layer_ + static_cast<int64_t>(i), m);
      PrecisionScope precision(ctx.precision);
      if (head && i + 1 == layers_.size()) {
        *head = forward_layer_head(*layers_[i], h);
        if (*head) {
          h.clear();
          continue;
        }
      }
      h = forward_layer(*layers_[i], h);
    }
  }
  // The loss takes float32 unless it reads 16-bit outputs itself; outputs
  // handed to the caller are widened in take_outputs.
  if (is_last() && !(loss_ && loss_->takes_16bit()) && !(head && *head)) h = to_float32(h);
  // A layer that declared a stash or pop but skipped it in this forward.
  auto declared_by = [&](const std::string& name, bool stash) {
    for (const auto& l : layers_)
      for (const std::string& n : stash ? l->stashes() : l->pops())
        if (n == name) return l->name();
    return std::string("?");
  };
  auto take = [&](const std::string& name) {
    GPIPE_CHECK(store.held().count(name), "layer '", declared_by(name, true),
                "' declares a stash of skip '", name, "' but its forward did not stash it");
    return store.pop(name, who);
  };
  for (const std::string& name : routes_.out_bundle) h.push_back(take(name));
  for (const auto& [peer, names] : routes_.to) {
    Bundle& out = (*skips_out)[peer];
    for (const std::string& name : names) out.push_back(take(name));
  }
  if (!store.empty()) {
    const std::string& name = store.held().begin()->first;
    const std::string popper = declared_by(name, false);
    throw Error(popper != "?" ? detail::concat("layer '", popper, "' declares a pop of skip '",
                                               name, "' but its forward did not pop it")
                              : detail::concat("layer '", declared_by(name, true),
                                               "' declares a stash of skip '", name,
                                               "' but its forward did not stash it"));
  }
  return h;
}

Tensor Stage::scaled_loss(const Saved& s, const Bundle& targets, const StepContext& ctx) {
  const Tensor sum = s.head ? loss_->sum_head(*s.head, targets) : loss_->sum(s.outputs, targets);
  return ops::mul_scalar(sum, ctx.loss_scale);
}

std::optional<LinearHead>* Stage::head_slot(Saved& s) const {
  return loss_ && loss_->takes_head() && routes_.out_bundle.empty() ? &s.head : nullptr;
}

Stage::Saved& Stage::saved(int m, const char* action) {
  auto it = saved_.find(m);
  GPIPE_ASSERT(it != saved_.end(), "stage ", index_, ": ", action, " of micro-batch ", m,
               " before its forward");
  return it->second;
}

namespace {
// Fresh leaves for a stage's inputs: detached, asking for a gradient where the sender wants one.
Bundle make_leaves(const Message& in, std::vector<bool>& wants_grad) {
  wants_grad = in.requires_grad;
  wants_grad.resize(in.tensors.size(), false);
  Bundle leaves;
  for (size_t i = 0; i < in.tensors.size(); ++i) {
    Tensor x = in.tensors[i].defined() ? in.tensors[i].detach() : in.tensors[i];
    if (wants_grad[i] && grad_mode_enabled()) x.set_requires_grad(true);
    leaves.push_back(x);
  }
  return leaves;
}
}  // namespace

StageMessage Stage::forward(int m, const StageMessage& in, bool keep_graph, const StepContext& ctx,
                            Tracer* tracer) {
  ScopedEvent ev(tracer, index_, "F" + std::to_string(m), "forward", m, ctx.step);
  Saved s;
  s.graph = keep_graph && grad_mode_enabled();
  s.leaves = make_leaves(in.main, s.input_requires);
  for (const auto& [peer, msg] : in.skips)
    s.skip_leaves[peer] = make_leaves(msg, s.skip_requires[peer]);
  Bundle out;
  std::map<int, Bundle> skips_out;
  {
    std::optional<NoGradGuard> no_grad;
    if (!keep_graph) no_grad.emplace();
    out = run(m, s.leaves, s.skip_leaves, ctx, &skips_out, head_slot(s));
  }
  // Whether a float output needs a gradient is only known from a graph,
  // which a rematerialised forward does not build; so every float output of
  // a cell that has parameters or differentiable inputs asks for one, in
  // both modes alike (Note [Boundary gradients]). Unused ones come back undefined.
  bool differentiable = differentiable_;
  for (bool r : s.input_requires) differentiable = differentiable || r;
  for (const auto& [peer, req] : s.skip_requires)
    for (bool r : req) differentiable = differentiable || r;
  auto message = [&](const Bundle& tensors) {
    Message msg;
    msg.tensors = tensors;
    for (const Tensor& t : tensors)
      msg.requires_grad.push_back(differentiable && t.defined() && is_float_like(t.dtype()));
    return msg;
  };
  StageMessage result;
  if (loss_ || s.graph) s.outputs = out;
  if (s.graph) s.skip_outputs = skips_out;
  if (!loss_) result.main = message(out);
  for (const auto& [peer, tensors] : skips_out) result.skips[peer] = message(tensors);
  // A forward-only program (no grad mode) keeps nothing on the stages before
  // the last: no R or B will come for it.
  if (loss_ || grad_mode_enabled()) saved_[m] = std::move(s);
  return result;
}

double Stage::loss(int m, const Bundle& targets, const StepContext& ctx) {
  GPIPE_ASSERT(loss_ != nullptr, "stage ", index_, " is not the last stage: it has no loss");
  Saved& s = saved(m, "loss");
  s.targets = targets;
  Tensor value;
  {
    std::optional<NoGradGuard> no_grad;
    if (!s.graph) no_grad.emplace();
    value = scaled_loss(s, targets, ctx);
  }
  GPIPE_ASSERT(value.numel() == 1, "stage ", index_, ": the loss is not a scalar");
  if (s.graph) s.root = value;
  s.outputs.clear();  // the graph, if any, lives on through the root
  s.head.reset();
  const double v = value.item();
  losses_[m] = v;
  return v;
}

void Stage::recompute(int m, const StepContext& ctx, Tracer* tracer) {
  Saved& s = saved(m, "recompute");
  ScopedEvent ev(tracer, index_, "R" + std::to_string(m), "recompute", m, ctx.step);
  RecomputationScope recomputing;
  s.skip_outputs.clear();
  s.outputs = run(m, s.leaves, s.skip_leaves, ctx, &s.skip_outputs, head_slot(s));
  s.graph = true;
  if (loss_) {
    s.root = scaled_loss(s, s.targets, ctx);
    s.outputs.clear();
    s.head.reset();
  }
}

void Stage::take_roots(Saved& s, int m, const StageMessage& grads, std::vector<Tensor>& roots,
                       std::vector<Tensor>& root_grads) {
  GPIPE_ASSERT(s.graph, "stage ", index_, ": backward of micro-batch ", m,
               " without its graph (no recompute ran)");
  GPIPE_ASSERT(!s.weights, "stage ", index_, ": a second backward of micro-batch ", m);
  auto add = [&](const Bundle& outputs, const Message& g, const char* what) {
    GPIPE_ASSERT(g.tensors.size() == outputs.size(), "stage ", index_, ": got ", g.tensors.size(),
                 " gradients for ", outputs.size(), " ", what);
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!g.tensors[i].defined() || !outputs[i].requires_grad()) continue;
      roots.push_back(outputs[i]);
      root_grads.push_back(g.tensors[i]);
    }
  };
  if (loss_) {
    if (s.root.defined() && s.root.requires_grad()) roots.push_back(s.root);
  } else {
    add(s.outputs, grads.main, "outputs");
  }
  for (const auto& [peer, outputs] : s.skip_outputs) {
    auto it = grads.skips.find(peer);
    GPIPE_ASSERT(it != grads.skips.end(), "stage ", index_, ": micro-batch ", m,
                 "'s skip gradients from stage ", peer, " are missing");
    add(outputs, it->second, "skips");
  }
  s.outputs.clear();
  s.head.reset();
  s.skip_outputs.clear();
  s.root = Tensor();
}

StageMessage Stage::input_gradients(const Saved& s) const {
  auto grads = [](const Bundle& leaves, const std::vector<bool>& wants_grad) {
    Message out;
    for (size_t i = 0; i < leaves.size(); ++i) {
      out.tensors.push_back(wants_grad[i] ? leaves[i].grad() : Tensor());
      out.requires_grad.push_back(false);
    }
    return out;
  };
  StageMessage out;
  out.main = grads(s.leaves, s.input_requires);
  for (const auto& [peer, leaves] : s.skip_leaves)
    out.skips[peer] = grads(leaves, s.skip_requires.at(peer));
  return out;
}

StageMessage Stage::backward(int m, const StageMessage& grads, const StepContext& ctx,
                             Tracer* tracer) {
  Saved s = std::move(saved(m, "backward"));
  saved_.erase(m);
  ScopedEvent ev(tracer, index_, "B" + std::to_string(m), "backward", m, ctx.step);
  std::vector<Tensor> roots, root_grads;
  take_roots(s, m, grads, roots, root_grads);
  if (!roots.empty()) gpipe::backward(roots, root_grads);
  return input_gradients(s);
}

StageMessage Stage::backward_input(int m, const StageMessage& grads, const StepContext& ctx,
                                   Tracer* tracer) {
  Saved& s = saved(m, "input backward");
  ScopedEvent ev(tracer, index_, "I" + std::to_string(m), "backward-input", m, ctx.step);
  std::vector<Tensor> roots, root_grads;
  take_roots(s, m, grads, roots, root_grads);
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < s.leaves.size(); ++i)
    if (s.input_requires[i]) inputs.push_back(s.leaves[i]);
  for (const auto& [peer, leaves] : s.skip_leaves)
    for (size_t i = 0; i < leaves.size(); ++i)
      if (s.skip_requires[peer][i]) inputs.push_back(leaves[i]);
  s.weights = roots.empty() ? WeightGradients() : gpipe::backward_input(roots, root_grads, inputs);
  StageMessage out = input_gradients(s);
  // Nothing after I needs the inputs (R comes before it): drop them and
  // their gradients now rather than at W (the message owns what it sends).
  for (Tensor& leaf : s.leaves)
    if (leaf.defined()) leaf.zero_grad();
  for (auto& [peer, leaves] : s.skip_leaves)
    for (Tensor& leaf : leaves)
      if (leaf.defined()) leaf.zero_grad();
  s.leaves.clear();
  s.skip_leaves.clear();
  s.targets.clear();
  return out;
}

void Stage::backward_weight(int m, const StepContext& ctx, Tracer* tracer) {
  Saved s = std::move(saved(m, "weight backward"));
  saved_.erase(m);
  GPIPE_ASSERT(s.weights, "stage ", index_, ": weight backward of micro-batch ", m,
               " before its input backward");
  ScopedEvent ev(tracer, index_, "W" + std::to_string(m), "backward-weight", m, ctx.step);
  s.weights->run();
}

Bundle Stage::take_outputs(int m) {
  Saved& s = saved(m, "output");
  Bundle out;
  if (s.head) {  // the product the loss would have fused, taken now
    NoGradGuard no_grad;
    out = s.head->logits();
  } else {
    out = std::move(s.outputs);
  }
  saved_.erase(m);
  return to_float32(out);
}

double Stage::loss_value(int m) const {
  auto it = losses_.find(m);
  GPIPE_ASSERT(it != losses_.end(), "loss of micro-batch ", m, " is not available");
  return it->second;
}

void Stage::clear() {
  saved_.clear();
  losses_.clear();
}

}  // namespace gpipe
