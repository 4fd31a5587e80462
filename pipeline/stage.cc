#include "pipeline/stage.h"

#include <optional>

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
             std::shared_ptr<Loss> loss)
    : index_(index),
      layers_(std::move(layers)),
      first_layer_(first_layer),
      device_(device),
      loss_(std::move(loss)) {}

Bundle Stage::run(int m, const Bundle& x, const StepContext& ctx) {
  Bundle h = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    // Note [Remat RNG]: the key names the work (seed, step, micro-batch, layer).
    RngScope rng({ctx.seed, static_cast<uint64_t>(ctx.step),
                  static_cast<uint64_t>(m + ctx.micro_batch_offset),
                  static_cast<uint64_t>(first_layer_ + static_cast<int64_t>(i))});
    DecodeScope decode(ctx.decode, first_layer_ + static_cast<int64_t>(i), m);
    h = layers_[i]->forward(h);
  }
  return h;
}

Tensor Stage::scaled_loss(const Bundle& outputs, const Bundle& targets, const StepContext& ctx) {
  return ops::mul_scalar(loss_->sum(outputs, targets), ctx.loss_scale);
}

Stage::Saved& Stage::saved(int m, const char* action) {
  auto it = saved_.find(m);
  GPIPE_ASSERT(it != saved_.end(), "stage ", index_, ": ", action, " of micro-batch ", m,
               " before its forward");
  return it->second;
}

Message Stage::forward(int m, const Message& in, bool keep_graph, const StepContext& ctx,
                       Tracer* tracer) {
  ScopedEvent ev(tracer, index_, "F" + std::to_string(m), "forward", m, ctx.step);
  Saved s;
  s.graph = keep_graph && grad_mode_enabled();
  s.input_requires = in.requires_grad;
  s.input_requires.resize(in.tensors.size(), false);
  for (size_t i = 0; i < in.tensors.size(); ++i) {
    Tensor x = in.tensors[i].defined() ? in.tensors[i].detach() : in.tensors[i];
    if (s.input_requires[i] && grad_mode_enabled()) x.set_requires_grad(true);
    s.leaves.push_back(x);
  }
  Bundle out;
  {
    std::optional<NoGradGuard> no_grad;
    if (!keep_graph) no_grad.emplace();
    out = run(m, s.leaves, ctx);
  }
  Message msg;
  if (loss_ || s.graph) s.outputs = out;
  if (!loss_) {
    msg.tensors = out;
    // Whether a float output needs a gradient is only known from a graph,
    // which a rematerialised forward does not build; so every float output of
    // a cell that has parameters or differentiable inputs asks for one, in
    // both modes alike (Note [Boundary gradients]). Unused ones come back undefined.
    bool differentiable = false;
    for (const auto& l : layers_) differentiable = differentiable || !l->parameters().empty();
    for (bool r : s.input_requires) differentiable = differentiable || r;
    for (const Tensor& t : out)
      msg.requires_grad.push_back(differentiable && t.defined() && is_floating(t.dtype()));
  }
  // A forward-only program (no grad mode) keeps nothing on the stages before
  // the last: no R or B will come for it.
  if (loss_ || grad_mode_enabled()) saved_[m] = std::move(s);
  return msg;
}

double Stage::loss(int m, const Bundle& targets, const StepContext& ctx) {
  GPIPE_ASSERT(loss_ != nullptr, "stage ", index_, " is not the last stage: it has no loss");
  Saved& s = saved(m, "loss");
  s.targets = targets;
  Tensor value;
  {
    std::optional<NoGradGuard> no_grad;
    if (!s.graph) no_grad.emplace();
    value = scaled_loss(s.outputs, targets, ctx);
  }
  GPIPE_ASSERT(value.numel() == 1, "stage ", index_, ": the loss is not a scalar");
  if (s.graph) s.root = value;
  s.outputs.clear();  // the graph, if any, lives on through the root
  const double v = value.item();
  losses_[m] = v;
  return v;
}

void Stage::recompute(int m, const StepContext& ctx, Tracer* tracer) {
  Saved& s = saved(m, "recompute");
  ScopedEvent ev(tracer, index_, "R" + std::to_string(m), "recompute", m, ctx.step);
  RecomputationScope recomputing;
  s.outputs = run(m, s.leaves, ctx);
  s.graph = true;
  if (loss_) {
    s.root = scaled_loss(s.outputs, s.targets, ctx);
    s.outputs.clear();
  }
}

void Stage::take_roots(Saved& s, int m, const Message& grads, std::vector<Tensor>& roots,
                       std::vector<Tensor>& root_grads) {
  GPIPE_ASSERT(s.graph, "stage ", index_, ": backward of micro-batch ", m,
               " without its graph (no recompute ran)");
  GPIPE_ASSERT(!s.weights, "stage ", index_, ": a second backward of micro-batch ", m);
  if (loss_) {
    if (s.root.defined() && s.root.requires_grad()) roots.push_back(s.root);
  } else {
    GPIPE_ASSERT(grads.tensors.size() == s.outputs.size(), "stage ", index_, ": got ",
                 grads.tensors.size(), " gradients for ", s.outputs.size(), " outputs");
    for (size_t i = 0; i < s.outputs.size(); ++i) {
      if (!grads.tensors[i].defined() || !s.outputs[i].requires_grad()) continue;
      roots.push_back(s.outputs[i]);
      root_grads.push_back(grads.tensors[i]);
    }
  }
  s.outputs.clear();
  s.root = Tensor();
}

Message Stage::input_gradients(const Saved& s) const {
  Message out;
  for (size_t i = 0; i < s.leaves.size(); ++i) {
    out.tensors.push_back(s.input_requires[i] ? s.leaves[i].grad() : Tensor());
    out.requires_grad.push_back(false);
  }
  return out;
}

Message Stage::backward(int m, const Message& grads, const StepContext& ctx, Tracer* tracer) {
  Saved s = std::move(saved(m, "backward"));
  saved_.erase(m);
  ScopedEvent ev(tracer, index_, "B" + std::to_string(m), "backward", m, ctx.step);
  std::vector<Tensor> roots, root_grads;
  take_roots(s, m, grads, roots, root_grads);
  if (!roots.empty()) gpipe::backward(roots, root_grads);
  return input_gradients(s);
}

Message Stage::backward_input(int m, const Message& grads, const StepContext& ctx, Tracer* tracer) {
  Saved& s = saved(m, "input backward");
  ScopedEvent ev(tracer, index_, "I" + std::to_string(m), "backward-input", m, ctx.step);
  std::vector<Tensor> roots, root_grads;
  take_roots(s, m, grads, roots, root_grads);
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < s.leaves.size(); ++i)
    if (s.input_requires[i]) inputs.push_back(s.leaves[i]);
  s.weights = roots.empty() ? WeightGradients() : gpipe::backward_input(roots, root_grads, inputs);
  Message out = input_gradients(s);
  // Nothing after I needs the inputs (R comes before it): drop them and
  // their gradients now rather than at W (the message owns what it sends).
  for (Tensor& leaf : s.leaves)
    if (leaf.defined()) leaf.zero_grad();
  s.leaves.clear();
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
  Bundle out = std::move(s.outputs);
  saved_.erase(m);
  return out;
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
