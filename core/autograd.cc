// Autograd's graph: grad mode, the nodes that record ops (record,
// record_split, record_accumulate_into), leaves' gradient accumulators,
// rematerialise (a forward re-run in backward) and gradient accumulation.
// The engine that runs the graph backward is autograd_engine.cc's.
#include "core/autograd.h"

#include <atomic>
#include <limits>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd_engine.h"
#include "core/parallel.h"
#include "core/rng.h"

namespace gpipe {
namespace {

thread_local bool t_grad_mode = true;
thread_local bool t_recomputing = false;
std::atomic<uint64_t> g_sequence{0};
std::atomic<int64_t> g_live_nodes{0};
AccumulateFn g_accumulate[kNumDeviceTypes] = {nullptr, nullptr};

class CountedNode : public Node {
 public:
  CountedNode() { g_live_nodes.fetch_add(1, std::memory_order_relaxed); }
  ~CountedNode() override { g_live_nodes.fetch_sub(1, std::memory_order_relaxed); }
};

class LambdaNode final : public CountedNode {
 public:
  LambdaNode(const char* name, BackwardFn fn) : name_(name), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    GPIPE_CHECK(fn_ != nullptr, "backward through '", name_,
                "' a second time: its saved tensors "
                "were freed by the first backward (pass retain_graph=true to keep them)");
    return fn_(grads);
  }
  void release() override { fn_ = nullptr; }

 private:
  const char* name_;
  BackwardFn fn_;
};

// The node of record_split: the full backward asks for every input.
class SplitLambdaNode final : public CountedNode {
 public:
  SplitLambdaNode(const char* name, SplitBackwardFn fn) : name_(name), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    return apply_some(grads, std::vector<bool>(next_edges.size(), true));
  }
  bool splits() const override { return true; }
  std::vector<Tensor> apply_some(const std::vector<Tensor>& grads,
                                 const std::vector<bool>& wanted) override {
    GPIPE_CHECK(fn_ != nullptr, "backward through '", name_,
                "' a second time: its saved tensors "
                "were freed by the first backward (pass retain_graph=true to keep them)");
    return fn_(grads, wanted);
  }
  void release() override { fn_ = nullptr; }

 private:
  const char* name_;
  SplitBackwardFn fn_;
};

// Gradient sums are elementwise, so they are split over the intra-op pool
// in chunks of at least this many elements (the result is the same): a
// Transformer's residual stream sums two 1 MB gradients per sublayer, which
// ran on one core while the other waited.
constexpr int64_t kAccumulateGrain = int64_t{1} << 15;

template <class T>
void add_into(T* dst, const T* src, int64_t n) {
  parallel_for(0, n, kAccumulateGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) dst[i] += src[i];
  });
}

// 16-bit gradients add in float32 and round once.
template <class T, class Load, class Store>
void add_into_half(T* dst, const T* src, int64_t n, Load load, Store store) {
  parallel_for(0, n, kAccumulateGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) dst[i].bits = store(load(dst[i].bits) + load(src[i].bits));
  });
}

std::atomic<CpuAccumulateIntoFn> g_cpu_accumulate_into{nullptr};

void cpu_accumulate_into(Tensor& dst, const Tensor& src) {
  Tensor s = src.contiguous();
  if (CpuAccumulateIntoFn f = g_cpu_accumulate_into.load(std::memory_order_acquire)) {
    f(dst, s);
    return;
  }
  // The conversions as lambdas, not function pointers: inlined, so the
  // loop vectorizes (as pointers, three calls an element were 13% of W2's
  // bf16 step on an Intel Xeon).
  if (dst.dtype() == DType::kBFloat16)
    return add_into_half(
        dst.data<bfloat16>(), s.data<bfloat16>(), dst.numel(),
        [](uint16_t b) { return bf16_bits_to_float(b); },
        [](float f) { return float_to_bf16_bits(f); });
  if (dst.dtype() == DType::kFloat16)
    return add_into_half(
        dst.data<float16>(), s.data<float16>(), dst.numel(),
        [](uint16_t b) { return f16_bits_to_float(b); },
        [](float f) { return float_to_f16_bits(f); });
  dispatch_floating(dst.dtype(), "gradient accumulation", [&](auto z) {
    using T = decltype(z);
    add_into(dst.data<T>(), s.data<T>(), dst.numel());
  });
}

Tensor cpu_accumulate(const Tensor& a, const Tensor& b) {
  Tensor out = a.contiguous().clone();
  cpu_accumulate_into(out, b);
  return out;
}

}  // namespace

bool sole_handle(const Tensor& t) {
  if (!t.defined() || t.impl_ptr().use_count() != 1 || t.storage().use_count() != 1) return false;
  const TensorImpl& i = *t.impl_ptr();
  return !i.requires_grad && i.grad_fn == nullptr && i.grad == nullptr && t.is_contiguous() &&
         i.offset == 0 && t.nbytes() == t.storage()->nbytes();
}

void accumulate_into_slot(Tensor& slot, const Tensor& g) {
  if (slot.device().is_cpu() && g.device() == slot.device() && g.shape() == slot.shape() &&
      g.dtype() == slot.dtype() && sole_handle(slot)) {
    cpu_accumulate_into(slot, g);
    return;
  }
  slot = accumulate(slot, g);
}

namespace {

// Adds the gradient of a leaf into its grad(), in place once it exists.
class AccumulateGrad final : public CountedNode {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
    output_meta.push_back({leaf_->shape, leaf_->dtype, leaf_->storage->device()});
    // Runs as soon as its gradient is complete: a weight gradient waiting
    // for the end of the backward would keep every layer's at once (a
    // cell's whole parameter bytes). Its value is the same either way.
    sequence_nr = std::numeric_limits<uint64_t>::max();
  }
  std::string name() const override { return "AccumulateGrad"; }
  const TensorImpl* accumulates_into() const override { return leaf_.get(); }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    MemoryCategoryGuard category(MemoryCategory::kGradient);
    Tensor g = std::move(grads[0]);
    grads.clear();
    if (!leaf_->grad) {
      if (sole_handle(g) && g.dtype() == leaf_->dtype && g.shape() == leaf_->shape) {
        // Note [Gradients in place] in core/autograd_engine.h.
        g.storage()->set_category(MemoryCategory::kGradient);
        leaf_->grad = g.impl_ptr();
      } else {
        leaf_->grad = g.clone().impl_ptr();  // owned: the incoming tensor may alias others
      }
    } else {
      Tensor acc(leaf_->grad);
      if (acc.device().is_cpu() && acc.is_contiguous()) {
        cpu_accumulate_into(acc, g);
      } else {
        leaf_->grad = accumulate(acc, g).impl_ptr();
      }
    }
    return {};
  }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// The node of record_accumulate_into: calls its function with the leaf's
// grad() (zeros if it has none yet, made contiguous if it is not).
class AccumulateIntoNode final : public CountedNode {
 public:
  AccumulateIntoNode(const char* name, std::shared_ptr<TensorImpl> leaf, AccumulateIntoFn fn)
      : name_(name), leaf_(std::move(leaf)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  const TensorImpl* accumulates_into() const override { return leaf_.get(); }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    GPIPE_CHECK(fn_ != nullptr, "backward through '", name_,
                "' a second time: its saved tensors "
                "were freed by the first backward (pass retain_graph=true to keep them)");
    MemoryCategoryGuard category(MemoryCategory::kGradient);
    if (!leaf_->grad)
      leaf_->grad = Tensor::zeros(leaf_->shape, leaf_->dtype, leaf_->storage->device()).impl_ptr();
    Tensor acc(leaf_->grad);
    GPIPE_CHECK(acc.dtype() == leaf_->dtype && acc.device() == leaf_->storage->device(),
                "backward through '", name_, "': the tensor's grad() is ", acc.dtype(), " on ",
                acc.device(), " but the tensor is ", leaf_->dtype, " on ",
                leaf_->storage->device());
    if (!acc.is_contiguous()) {
      acc = acc.contiguous();  // a fresh contiguous copy of a strided grad
      leaf_->grad = acc.impl_ptr();
    }
    fn_(grads, acc);
    return {};
  }
  void release() override { fn_ = nullptr; }

 private:
  const char* name_;
  std::shared_ptr<TensorImpl> leaf_;
  AccumulateIntoFn fn_;
};

void attach(const std::shared_ptr<Node>& node, const std::vector<Tensor*>& outputs) {
  node->sequence_nr = g_sequence.fetch_add(1, std::memory_order_relaxed);
  for (size_t i = 0; i < outputs.size(); ++i) {
    TensorImpl& o = outputs[i]->impl();
    o.grad_fn = node;
    o.output_nr = static_cast<uint32_t>(i);
    o.requires_grad = true;
    node->output_meta.push_back({o.shape, o.dtype, o.storage->device()});
  }
}

class RematNode final : public CountedNode {
 public:
  RematNode(ForwardFn fn, std::vector<Tensor> inputs)
      : fn_(std::move(fn)), ctx_(current_rng_context()) {
    for (const Tensor& t : inputs) {
      requires_.push_back(t.defined() && t.requires_grad());
      saved_.push_back(t.defined() ? t.detach() : t);
    }
  }
  std::string name() const override { return "Remat"; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    GPIPE_CHECK(fn_ != nullptr,
                "backward through a rematerialised forward a second time: its saved inputs "
                "were freed by the first backward");
    EnableGradGuard enable;
    RngScope rng(ctx_);  // Note [Remat RNG]: the recompute draws what the forward drew
    std::vector<Tensor> leaves;
    for (size_t i = 0; i < saved_.size(); ++i) {
      Tensor x = saved_[i].defined() ? saved_[i].detach() : saved_[i];
      if (requires_[i]) x.set_requires_grad(true);
      leaves.push_back(x);
    }
    RecomputationScope recomputing;
    std::vector<Tensor> outs = fn_(leaves);
    GPIPE_CHECK(outs.size() == num_outputs_, "rematerialise: the recomputed forward returned ",
                outs.size(), " tensors, the first forward ", num_outputs_);
    std::vector<Tensor> roots, root_grads;
    for (size_t j = 0; j < float_outputs_.size(); ++j) {
      const Tensor& o = outs[float_outputs_[j]];
      GPIPE_CHECK(o.shape() == output_meta[j].shape, "rematerialise: recomputed output ",
                  float_outputs_[j], " has shape ", o.shape(), ", the first forward gave ",
                  output_meta[j].shape);
      if (o.requires_grad()) {
        roots.push_back(o);
        root_grads.push_back(grads[j]);
      }
    }
    if (!roots.empty()) gpipe::backward(roots, root_grads);
    std::vector<Tensor> result;
    for (size_t i = 0; i < leaves.size(); ++i)
      result.push_back(requires_[i] ? leaves[i].grad() : Tensor());
    return result;
  }
  void release() override {
    fn_ = nullptr;
    saved_.clear();
  }
  // Which of fn's outputs are float (and so outputs of this node), in order.
  void set_outputs(size_t total, std::vector<size_t> float_outputs) {
    num_outputs_ = total;
    float_outputs_ = std::move(float_outputs);
  }

 private:
  size_t num_outputs_ = 0;
  std::vector<size_t> float_outputs_;
  ForwardFn fn_;
  RngContext ctx_;
  std::vector<Tensor> saved_;
  std::vector<bool> requires_;
};

}  // namespace

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.output_nr()};
  TensorImpl& impl = t.impl();
  std::shared_ptr<Node> acc = impl.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl.grad_accumulator = acc;
  }
  return {acc, 0};
}

bool grad_mode_enabled() { return t_grad_mode; }
bool in_recomputation() { return t_recomputing; }
RecomputationScope::RecomputationScope() : prev_(t_recomputing) { t_recomputing = true; }
RecomputationScope::~RecomputationScope() { t_recomputing = prev_; }
NoGradGuard::NoGradGuard() : prev_(t_grad_mode) { t_grad_mode = false; }
NoGradGuard::~NoGradGuard() { t_grad_mode = prev_; }
EnableGradGuard::EnableGradGuard() : prev_(t_grad_mode) { t_grad_mode = true; }
EnableGradGuard::~EnableGradGuard() { t_grad_mode = prev_; }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_mode) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_mode) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(const char* name, const std::vector<Tensor>& inputs, std::vector<Tensor*> outputs,
            BackwardFn backward) {
  if (!needs_grad(inputs)) return;
  auto node = std::make_shared<LambdaNode>(name, std::move(backward));
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  attach(node, outputs);
}

void record_split(const char* name, const std::vector<Tensor>& inputs, Tensor& output,
                  SplitBackwardFn backward) {
  if (!needs_grad(inputs)) return;
  auto node = std::make_shared<SplitLambdaNode>(name, std::move(backward));
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  attach(node, std::vector<Tensor*>{&output});
}

std::vector<Tensor> Node::apply_some(const std::vector<Tensor>& grad_outputs,
                                     const std::vector<bool>& /*wanted*/) {
  std::vector<Tensor> copy = grad_outputs;
  return apply(std::move(copy));
}

bool accumulates_in_place(const Tensor& t) {
  return t.defined() && t.requires_grad() && !t.grad_fn() && is_float_like(t.dtype());
}

void record_accumulate_into(const char* name, const Tensor& leaf, Tensor& output,
                            AccumulateIntoFn backward) {
  if (!needs_grad({&leaf})) return;
  GPIPE_CHECK(accumulates_in_place(leaf), "record_accumulate_into('", name,
              "'): the tensor is not a leaf that requires grad");
  auto node = std::make_shared<AccumulateIntoNode>(name, leaf.impl_ptr(), std::move(backward));
  attach(node, std::vector<Tensor*>{&output});
}

std::vector<Tensor> rematerialise(const ForwardFn& fn, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;
    outs = fn(inputs);
  }
  if (!t_grad_mode) return outs;
  auto node = std::make_shared<RematNode>(fn, inputs);
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  std::vector<Tensor*> ptrs;
  std::vector<size_t> float_outputs;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].defined() || !is_float_like(outs[i].dtype())) continue;  // ints pass through
    outs[i] =
        outs[i].detach();  // a fresh handle: never re-parent a tensor fn merely passed through
    ptrs.push_back(&outs[i]);
    float_outputs.push_back(i);
  }
  node->set_outputs(outs.size(), std::move(float_outputs));
  attach(node, ptrs);
  return outs;
}

Tensor accumulate(const Tensor& a, const Tensor& b) {
  GPIPE_ASSERT(a.shape() == b.shape() && a.dtype() == b.dtype(), a.shape(), " vs ", b.shape());
  GPIPE_CHECK(a.device() == b.device(), "gradient accumulation across devices: ", a.device(),
              " and ", b.device());
  AccumulateFn f = g_accumulate[static_cast<int>(a.device().type)];
  if (f) return f(a, b);
  GPIPE_CHECK(a.device().is_cpu(), "no gradient accumulation kernel for ", a.device());
  return cpu_accumulate(a, b);
}

void register_accumulate(DeviceType type, AccumulateFn fn) {
  g_accumulate[static_cast<int>(type)] = fn;
}

CpuAccumulateIntoFn register_cpu_accumulate_into(CpuAccumulateIntoFn fn) {
  return g_cpu_accumulate_into.exchange(fn, std::memory_order_acq_rel);
}

int64_t live_node_count() { return g_live_nodes.load(); }

}  // namespace gpipe
