#include "pipeline/profile.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <vector>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/error.h"

namespace gpipe {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int64_t live_activations(Device d) {
  return allocator_for(d).stats().live_bytes(MemoryCategory::kActivation);
}

// Fresh leaves for `x` (float ones require grad and are also listed in
// `inputs`) and the device they are on.
Device make_leaves(const Bundle& x, Bundle& leaves, std::vector<Tensor>& inputs) {
  for (const Tensor& t : x) {
    Tensor l = t.defined() ? t.detach() : t;
    if (l.defined() && is_float_like(l.dtype())) {
      l.set_requires_grad(true);
      inputs.push_back(l);
    }
    leaves.push_back(l);
  }
  return !x.empty() && x[0].defined() ? x[0].device() : kCpu;
}

// Evicts the CPU caches (a pass over a buffer twice the 32 MB L3 of the CPUs here)
// before each timed pass: in a pipeline a layer's weights and inputs are
// cold when its micro-batch comes back to it (the other layers and
// micro-batches ran in between); a profile that repeats one layer would
// time them hot, several times faster for small micro-batches, whose
// passes are bound by reading the weights.
void evict_caches(Device d) {
  if (!d.is_cpu()) return;
  static std::vector<unsigned char> buffer(64u << 20, 1);
  static volatile unsigned sink = 0;
  unsigned sum = 0;
  for (size_t i = 0; i < buffer.size(); i += 64) sum += buffer[i]++;
  sink = sink + sum;
}

int64_t live_workspace(Device d) {
  return allocator_for(d).stats().live_bytes(MemoryCategory::kWorkspace);
}

int64_t peak_workspace(Device d) {
  return allocator_for(d).stats().peak_bytes(MemoryCategory::kWorkspace);
}

struct SplitBackward {
  double input_s = 0, weight_s = 0;
  int64_t pending = 0;    // alive between I and W above the caller's `base`
  int64_t workspace = 0;  // peak scratch of I and W above `scratch`
};

// The split backward of `roots` (Note [Split backward]): I, the roots, grads
// and the inputs' gradients dropped, then W, each timed from cold caches;
// sets p's I and W transients.
SplitBackward run_split_backward(Device dev, std::vector<Tensor>& roots, std::vector<Tensor>& grads,
                                 std::vector<Tensor>& inputs, int64_t base, int64_t scratch,
                                 LayerProfile& p) {
  SplitBackward r;
  allocator_for(dev).reset_peak();
  const int64_t at_backward = live_activations(dev);
  evict_caches(dev);
  auto t0 = std::chrono::steady_clock::now();
  WeightGradients w = backward_input(roots, grads, inputs);
  r.input_s = seconds_since(t0);
  roots.clear();
  grads.clear();
  for (Tensor& l : inputs) l.zero_grad();
  r.pending = std::max<int64_t>(0, live_activations(dev) - base);
  const int64_t input_peak = allocator_for(dev).stats().peak_bytes(MemoryCategory::kActivation);
  r.workspace = peak_workspace(dev) - scratch;
  allocator_for(dev).reset_peak();
  const int64_t at_weight = live_activations(dev);
  evict_caches(dev);
  t0 = std::chrono::steady_clock::now();
  w.run();
  r.weight_s = seconds_since(t0);
  const int64_t weight_peak = allocator_for(dev).stats().peak_bytes(MemoryCategory::kActivation);
  p.input_extra_bytes = std::max<int64_t>(0, input_peak - at_backward);
  p.weight_extra_bytes = std::max<int64_t>(0, weight_peak - at_weight);
  p.backward_extra_bytes = std::max<int64_t>(0, std::max(input_peak, weight_peak) - at_backward);
  r.workspace = std::max(r.workspace, peak_workspace(dev) - scratch);
  return r;
}

}  // namespace

int64_t bundle_bytes(const Bundle& b, bool floating_only) {
  int64_t n = 0;
  for (const Tensor& t : b)
    if (t.defined() && (!floating_only || is_float_like(t.dtype())))
      n += static_cast<int64_t>(t.nbytes());
  return n;
}

std::vector<LayerProfile> profile_layers(const LayerList& layers, const Bundle& sample, int reps,
                                         const Loss* loss) {
  GPIPE_CHECK(reps >= 1, "profile_layers: reps must be >= 1, got ", reps);
  std::vector<LayerProfile> out;
  const bool head_last = loss != nullptr && loss->takes_head();
  Bundle x = sample;
  // What earlier layers stashed (layers/skip.h), as fresh leaves. A popped
  // skip's gradient is not timed as an input gradient (it is computed by
  // the layer's backward all the same); a stash adds no time of its own.
  SkipStore skips;
  for (const auto& layer : layers) {
    LayerProfile p;
    p.forward_seconds = p.backward_input_seconds = p.backward_weight_seconds = 1e300;
    for (auto& prm : layer->parameters())
      p.parameter_bytes += static_cast<int64_t>(prm.tensor->nbytes());
    Bundle next;
    SkipStore after;
    // Run 0 warms up (and creates the parameters' gradients, so the timed
    // runs accumulate into them, as every micro-batch but a step's first does).
    for (int rep = 0; rep <= reps; ++rep) {
      const bool timed = rep > 0;
      Bundle leaves;
      std::vector<Tensor> inputs;
      const Device dev = make_leaves(x, leaves, inputs);
      after = skips.detached();
      SkipScope scope(&after);
      const int64_t before = live_activations(dev), scratch = live_workspace(dev);
      allocator_for(dev).reset_peak();
      evict_caches(dev);
      auto t0 = std::chrono::steady_clock::now();
      // The last cell's last layer leaves its head for the loss (Stage::run).
      std::optional<LinearHead> head;
      if (head_last && &layer == &layers.back()) head = forward_layer_head(*layer, leaves);
      Bundle outs = head ? Bundle{head->hidden} : forward_layer(*layer, leaves);
      head.reset();
      if (timed) p.forward_seconds = std::min(p.forward_seconds, seconds_since(t0));
      p.activation_bytes = live_activations(dev) - before;
      p.output_bytes = bundle_bytes(outs);
      p.output_grad_bytes = bundle_bytes(outs, true);
      int64_t workspace = peak_workspace(dev) - scratch;
      std::vector<Tensor> roots, grads;
      for (const Tensor& o : outs)
        if (o.defined() && o.requires_grad()) {
          roots.push_back(o);
          grads.push_back(Tensor::full(o.shape(), 1e-3, o.dtype(), o.device()));
        }
      next.clear();
      for (const Tensor& o : outs) next.push_back(o.defined() ? o.detach() : o);
      outs.clear();
      SplitBackward split;
      if (!roots.empty()) {
        // What W waits for; the outputs (kept in `next` for the next layer) excluded.
        split =
            run_split_backward(dev, roots, grads, inputs, before + bundle_bytes(next), scratch, p);
        workspace = std::max(workspace, split.workspace);
      }
      p.workspace_bytes = std::max<int64_t>(0, workspace);
      if (timed) {
        p.backward_input_seconds = std::min(p.backward_input_seconds, split.input_s);
        p.backward_weight_seconds = std::min(p.backward_weight_seconds, split.weight_s);
      }
      p.pending_bytes = split.pending;
    }
    for (auto& prm : layer->parameters()) prm.tensor->zero_grad();
    layer->discard_step();
    out.push_back(p);
    x = next;
    skips = after.detached();
  }
  return out;
}

namespace {

// profile_loss of the loss `sum` computes on fresh leaves of `outputs`:
// one untimed run, then the best of `reps`, from cold caches (evict_caches).
//
// Times are split so that every remat mode's sum comes out right. The
// forward is timed without a graph, as a rematerialised cell computes it; a
// fused output loss (Note [Fused output loss] in ops/loss.cc) computes its
// gradients in its forward when a graph is kept, and that difference is
// counted as backward (I). So F + B is the step of a cell that keeps its
// graph, and F + R + B that of one that recomputes (R = F in the
// simulator): the no-graph forward, then the forward with its gradients.
LayerProfile profile_loss_of(const Bundle& outputs, const std::function<Tensor(const Bundle&)>& sum,
                             int reps) {
  LayerProfile p;
  p.forward_seconds = p.backward_input_seconds = p.backward_weight_seconds = 1e300;
  for (int rep = 0; rep <= reps; ++rep) {
    const bool timed = rep > 0;
    Bundle leaves;
    std::vector<Tensor> inputs;
    const Device dev = make_leaves(outputs, leaves, inputs);
    evict_caches(dev);
    auto t0 = std::chrono::steady_clock::now();
    {
      NoGradGuard no_grad;
      sum(leaves);
    }
    const double plain = seconds_since(t0);
    const int64_t before = live_activations(dev);
    evict_caches(dev);
    t0 = std::chrono::steady_clock::now();
    Tensor value = sum(leaves);
    const double with_graph = seconds_since(t0);
    p.activation_bytes = live_activations(dev) - before;
    SplitBackward split;
    if (value.requires_grad()) {
      // Split as the pipeline's last cell splits it: a fused output loss
      // keeps its weight's gradient until W.
      std::vector<Tensor> roots{value}, grads{Tensor::full(value.shape(), 1.0, value.dtype(), dev)};
      value = Tensor();
      split = run_split_backward(dev, roots, grads, inputs, before, live_workspace(dev), p);
      p.pending_bytes = split.pending;
    }
    if (timed) {
      p.forward_seconds = std::min(p.forward_seconds, plain);
      p.backward_input_seconds =
          std::min(p.backward_input_seconds, std::max(0.0, with_graph - plain) + split.input_s);
      p.backward_weight_seconds = std::min(p.backward_weight_seconds, split.weight_s);
    }
  }
  return p;
}

}  // namespace

LayerProfile profile_loss(Loss& loss, const Bundle& outputs, const Bundle& targets, int reps) {
  return profile_loss_of(
      outputs, [&](const Bundle& leaves) { return loss.sum(leaves, targets); }, reps);
}

LayerProfile profile_loss(Loss& loss, const LinearHead& head, const Bundle& targets, int reps) {
  Tensor weight = head.weight;
  LayerProfile p = profile_loss_of(
      {head.hidden},
      [&](const Bundle& leaves) {
        return loss.sum_head(LinearHead{leaves[0], weight, head.precision}, targets);
      },
      reps);
  weight.zero_grad();
  return p;
}

LayerProfile profile_model_loss(const Model& model, const Bundle& sample, const Bundle& targets,
                                int reps) {
  GPIPE_CHECK(model.loss != nullptr, "profile_model_loss: the model has no loss");
  std::optional<LinearHead> head;
  Bundle out;
  {
    NoGradGuard no_grad;
    out = run_layers(model.layers, sample, model.loss->takes_head() ? &head : nullptr);
  }
  return head ? profile_loss(*model.loss, *head, targets, reps)
              : profile_loss(*model.loss, out, targets, reps);
}

StageCosts cell_costs(const std::vector<LayerProfile>& profile, int64_t begin, int64_t end,
                      int64_t input_bytes, const LayerProfile* extra) {
  GPIPE_CHECK(0 <= begin && begin < end && end <= static_cast<int64_t>(profile.size()),
              "cell_costs: layers [", begin, ", ", end, ") outside the profile's ", profile.size());
  StageCosts c;
  c.forward = c.backward_input = c.backward_weight = 0;
  c.input_extra_bytes = c.weight_extra_bytes = 0;
  c.activation_bytes = static_cast<double>(input_bytes);
  // Between I and W a split op keeps its input: the cell's input and every
  // layer's outputs but the last's (the next layer's GEMMs read them).
  c.pending_bytes = static_cast<double>(input_bytes);
  for (int64_t i = begin; i < end; ++i) {
    const LayerProfile& p = profile[i];
    c.forward += p.forward_seconds;
    c.backward_input += p.backward_input_seconds;
    c.backward_weight += p.backward_weight_seconds;
    c.activation_bytes += static_cast<double>(p.activation_bytes);
    c.pending_bytes += static_cast<double>(p.pending_bytes);
    if (i + 1 < end) c.pending_bytes += static_cast<double>(p.output_bytes);
    c.backward_extra_bytes =
        std::max(c.backward_extra_bytes, static_cast<double>(p.backward_extra_bytes));
    c.input_extra_bytes = std::max(c.input_extra_bytes, static_cast<double>(p.input_extra_bytes));
    c.weight_extra_bytes =
        std::max(c.weight_extra_bytes, static_cast<double>(p.weight_extra_bytes));
  }
  if (extra) {
    c.input_extra_bytes =
        std::max(c.input_extra_bytes, static_cast<double>(extra->backward_extra_bytes));
    c.weight_extra_bytes =
        std::max(c.weight_extra_bytes, static_cast<double>(extra->weight_extra_bytes));
    c.forward += extra->forward_seconds;
    c.backward_input += extra->backward_input_seconds;
    c.backward_weight += extra->backward_weight_seconds;
    c.activation_bytes += static_cast<double>(extra->activation_bytes);
    c.pending_bytes += static_cast<double>(extra->pending_bytes);
    c.backward_extra_bytes =
        std::max(c.backward_extra_bytes, static_cast<double>(extra->backward_extra_bytes));
  }
  c.backward = c.backward_input + c.backward_weight;
  c.recompute = c.forward;
  c.input_bytes = static_cast<double>(input_bytes);
  return c;
}

}  // namespace gpipe
