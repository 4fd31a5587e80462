#include "pipeline/balance.h"

#include <algorithm>
#include <chrono>

#include "core/autograd.h"
#include "core/error.h"
#include "core/precision.h"

namespace gpipe {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Forward + backward seconds of each layer on `inputs` (balance_by = time).
std::vector<double> profile_layers(const LayerList& layers, Bundle x) {
  std::vector<double> secs;
  SkipStore skips;  // what earlier layers stashed, as fresh leaves
  for (const auto& layer : layers) {
    double best = 1e300;
    Bundle next;
    SkipStore after;
    for (int rep = 0; rep < 2; ++rep) {
      after = skips.detached();
      SkipScope scope(&after);
      Bundle leaves;
      for (const Tensor& t : x) {
        Tensor l = t.detach();
        if (is_float_like(l.dtype())) l.set_requires_grad(true);
        leaves.push_back(l);
      }
      const auto t0 = std::chrono::steady_clock::now();
      Bundle out = forward_layer(*layer, leaves);
      std::vector<Tensor> roots, grads;
      for (const Tensor& o : out)
        if (o.defined() && o.requires_grad()) {
          roots.push_back(o);
          grads.push_back(Tensor::full(o.shape(), 1e-3, o.dtype(), o.device()));
        }
      if (!roots.empty()) backward(roots, grads);
      best = std::min(best, seconds_since(t0));
      next.clear();
      for (const Tensor& o : out) next.push_back(o.detach());
    }
    for (auto& p : layer->parameters()) p.tensor->zero_grad();
    layer->discard_step();
    secs.push_back(best);
    x = next;
    skips = after.detached();
  }
  return secs;
}

}  // namespace

BalanceBy parse_balance_by(const std::string& name) {
  if (name == "cost") return BalanceBy::kCost;
  if (name == "time") return BalanceBy::kTime;
  if (name == "memory") return BalanceBy::kMemory;
  throw Error(detail::concat("unknown balance-by '", name, "' (expected cost, time or memory)"));
}

const char* balance_unit(BalanceBy by) {
  return by == BalanceBy::kTime ? "seconds" : by == BalanceBy::kMemory ? "bytes" : "FLOPs";
}

std::vector<double> layer_costs(const LayerList& layers, const std::vector<BundleSpec>& specs,
                                BalanceBy by, const Bundle& sample) {
  if (by == BalanceBy::kTime) return profile_layers(layers, sample);
  GPIPE_ASSERT(specs.size() == layers.size() + 1, "layer_costs: ", specs.size(), " specs for ",
               layers.size(), " layers");
  std::vector<double> costs;
  // A popping layer's cost may depend on what it pops: the earlier layers'
  // stashes are replayed in order (layers/skip.h).
  SkipSpecStore skips;
  SkipSpecScope scope(&skips);
  for (size_t i = 0; i < layers.size(); ++i) {
    if (by == BalanceBy::kMemory) {
      double bytes = 4.0 * static_cast<double>(layers[i]->parameter_count()) *
                     4;  // params, grads, 2 Adam moments
      // Under bf16 / fp16 (the caller's PrecisionScope) a float output
      // crosses layers and cells in 16 bits (Note [Mixed precision]).
      const bool half = current_precision() != Precision::kFloat32;
      for (const TensorSpec& t : specs[i + 1]) {
        const int64_t element = half && is_float_like(t.dtype) ? 2 : dtype_size(t.dtype);
        bytes += static_cast<double>(t.shape.numel() * element);
      }
      costs.push_back(bytes);
    } else {
      costs.push_back(layers[i]->cost(specs[i]));
    }
    layers[i]->output_spec(specs[i]);
  }
  return costs;
}

}  // namespace gpipe
