// Define-by-run reverse-mode autograd.
//
// Every recorded op creates one Node holding its backward closure and an Edge
// per input (to the input's grad_fn, or to the leaf's AccumulateGrad). The
// engine runs nodes in reverse creation order once all their consumers have
// delivered gradients, and frees each node's saved tensors as soon as it has
// run (unless retain_graph). Graphs never span threads: a pipeline stage
// builds its own graph from a fresh leaf input (see docs/ARCHITECTURE.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace gpipe {

struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

// What the engine needs to make a zero gradient for an output nobody used.
struct TensorMeta {
  Shape shape;
  DType dtype;
  Device device;
};

class Node {
 public:
  virtual ~Node() = default;
  virtual std::string name() const = 0;
  // Gradients w.r.t. this node's outputs (all defined) -> gradients w.r.t. its
  // inputs, one per next edge (undefined = no gradient).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  // Frees what the node saved for backward.
  virtual void release() {}
  // Split backward (Note [Split backward]): a node that can compute the
  // gradients of some of its inputs without the others returns true, and
  // apply_some then returns gradients for the inputs marked in `wanted` only
  // (undefined elsewhere) and keeps its saved tensors for a later call.
  virtual bool splits() const { return false; }
  // The leaf whose grad() this node adds into (gradient accumulators), or null.
  virtual const TensorImpl* accumulates_into() const { return nullptr; }
  virtual std::vector<Tensor> apply_some(const std::vector<Tensor>& grad_outputs,
                                         const std::vector<bool>& wanted);

  std::vector<Edge> next_edges;
  std::vector<TensorMeta> output_meta;
  uint64_t sequence_nr = 0;
};

using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

// True unless a NoGradGuard is alive on this thread.
bool grad_mode_enabled();

class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Re-enables recording inside a NoGradGuard (used by recomputation).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// True while rematerialise re-runs a forward for backward. Layers with side
// effects (BatchNorm's running statistics) skip them then.
bool in_recomputation();
class RecomputationScope {
 public:
  RecomputationScope();
  ~RecomputationScope();
  RecomputationScope(const RecomputationScope&) = delete;
  RecomputationScope& operator=(const RecomputationScope&) = delete;

 private:
  bool prev_;
};

// True if grad mode is on and any input requires grad: the op must record.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

// Records an op: makes a node named `name` whose backward maps output grads to
// input grads (one per input, undefined allowed), and makes `outputs` its
// results. No-op when nothing needs grad. `backward` must not capture the
// outputs themselves (use detach()) or the graph would keep itself alive.
void record(const char* name, const std::vector<Tensor>& inputs, std::vector<Tensor*> outputs,
            BackwardFn backward);
inline void record(const char* name, const std::vector<Tensor>& inputs, Tensor& output,
                   BackwardFn backward) {
  record(name, inputs, std::vector<Tensor*>{&output}, std::move(backward));
}

// An op whose backward can compute its inputs' gradients separately (the
// input-gradient now, a weight's later: Note [Split backward]). `wanted[i]`
// says whether input i's gradient is asked for in this call; the full
// backward asks for all. Return undefined for the others.
using SplitBackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs,
                                                          const std::vector<bool>& wanted)>;
void record_split(const char* name, const std::vector<Tensor>& inputs, Tensor& output,
                  SplitBackwardFn backward);

// Records an op whose backward adds its gradient straight into `leaf`'s
// grad() (created as zeros on first use) instead of returning a gradient for
// AccumulateGrad to add: an embedding's backward then touches only the table
// rows its indices used, with no dense table per call. `leaf` must satisfy
// accumulates_in_place. No-op when nothing needs grad.
using AccumulateIntoFn =
    std::function<void(const std::vector<Tensor>& grad_outputs, Tensor& leaf_grad)>;
void record_accumulate_into(const char* name, const Tensor& leaf, Tensor& output,
                            AccumulateIntoFn backward);
// True for a tensor whose gradient lands in its own grad(): one that requires
// grad, has no grad_fn, and is not an integer tensor.
bool accumulates_in_place(const Tensor& t);

// Runs backward from several roots at once; grads[i] defaults to ones for a
// one-element root. Gradients accumulate into the leaves' grad().
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {},
              bool retain_graph = false);

// Split backward (Note [Split backward]). backward_input runs the part of
// backward(roots, grads) that the gradients of `inputs` need, which must be
// leaves (a pipeline stage's inputs): their grad() is filled, and every
// gradient that flows only to other leaves (the parameters) is deferred.
// The returned WeightGradients holds those deferred parts (the nodes' saved
// tensors and their output gradients); run() computes them and accumulates
// into the parameters' grad(), so that backward_input then run() leave
// every grad() exactly as backward() would. Nodes that cannot split compute
// their parameters' gradients in backward_input already and hand them over.
class WeightGradients {
 public:
  WeightGradients();
  ~WeightGradients();  // dropped without run(): the weight gradients are discarded
  WeightGradients(WeightGradients&&) noexcept;
  WeightGradients& operator=(WeightGradients&&) noexcept;
  // Computes and accumulates the deferred gradients, then frees them. Once.
  void run();
  bool empty() const;
  // Deferred entries still held: split ops and handed-over gradients.
  size_t pending() const;
  // Of those, the split ops (whose weight-gradient arithmetic is still to do).
  size_t deferred_ops() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  friend WeightGradients backward_input(const std::vector<Tensor>&, const std::vector<Tensor>&,
                                        const std::vector<Tensor>&);
};
WeightGradients backward_input(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                               const std::vector<Tensor>& inputs);

// Rematerialisation (recomputation): runs fn(inputs) without keeping its internals;
// backward re-runs fn from the saved inputs with grad enabled (same RNG
// context, so dropout masks repeat) and backpropagates through it. Gradients
// reach both `inputs` and any parameters fn uses. Integer outputs pass
// through without gradient.
using ForwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
std::vector<Tensor> rematerialise(const ForwardFn& fn, const std::vector<Tensor>& inputs);

// Sum of a and b into a new tensor (same shape/dtype/device). Used for
// gradient accumulation; a backend may register a kernel for its device.
Tensor accumulate(const Tensor& a, const Tensor& b);
using AccumulateFn = Tensor (*)(const Tensor&, const Tensor&);
void register_accumulate(DeviceType type, AccumulateFn fn);
// dst += src in place, for contiguous CPU tensors of one shape and dtype
// (16-bit: in float32, rounded once). The ops library registers its
// vectorised kernel (ops/cpu/isa_dispatch.cc); without it core's own loop runs, with
// the same bits. Returns the function it replaces (tests run both).
using CpuAccumulateIntoFn = void (*)(Tensor& dst, const Tensor& src);
CpuAccumulateIntoFn register_cpu_accumulate_into(CpuAccumulateIntoFn fn);

// Number of graph nodes alive in this process (for tests of graph freeing).
int64_t live_node_count();

}  // namespace gpipe
