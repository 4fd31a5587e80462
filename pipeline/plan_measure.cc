// The planner's inputs, measured (Note [Planner] in docs/ARCHITECTURE.md):
// each layer profiled at several micro-batch sizes and blended between
// them (ModelCosts::at), two devices' slowdown computing at once, and a
// link's latency and bandwidth.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "core/autograd.h"
#include "core/error.h"
#include "core/parallel.h"
#include "pipeline/microbatch.h"
#include "pipeline/partition.h"
#include "pipeline/plan.h"

namespace gpipe {
namespace {

double blend(double a, double b, double t) { return std::max(0.0, a + t * (b - a)); }
int64_t blend(int64_t a, int64_t b, double t) {
  return static_cast<int64_t>(
      std::llround(blend(static_cast<double>(a), static_cast<double>(b), t)));
}

LayerProfile blend(const LayerProfile& a, const LayerProfile& b, double t) {
  LayerProfile p;
  p.forward_seconds = blend(a.forward_seconds, b.forward_seconds, t);
  p.backward_input_seconds = blend(a.backward_input_seconds, b.backward_input_seconds, t);
  p.backward_weight_seconds = blend(a.backward_weight_seconds, b.backward_weight_seconds, t);
  p.activation_bytes = blend(a.activation_bytes, b.activation_bytes, t);
  p.output_bytes = blend(a.output_bytes, b.output_bytes, t);
  p.output_grad_bytes = blend(a.output_grad_bytes, b.output_grad_bytes, t);
  p.pending_bytes = blend(a.pending_bytes, b.pending_bytes, t);
  p.backward_extra_bytes = blend(a.backward_extra_bytes, b.backward_extra_bytes, t);
  p.input_extra_bytes = blend(a.input_extra_bytes, b.input_extra_bytes, t);
  p.weight_extra_bytes = blend(a.weight_extra_bytes, b.weight_extra_bytes, t);
  p.workspace_bytes = blend(a.workspace_bytes, b.workspace_bytes, t);
  p.parameter_bytes = a.parameter_bytes;
  return p;
}

// a + t (b - a) for every per-micro-batch figure; `rows` is the result's.
ModelProfile blend(const ModelProfile& a, const ModelProfile& b, double t, int64_t rows) {
  ModelProfile p;
  p.rows = rows;
  for (size_t i = 0; i < a.layers.size(); ++i)
    p.layers.push_back(blend(a.layers[i], b.layers[i], t));
  p.loss = blend(a.loss, b.loss, t);
  p.input_bytes = blend(a.input_bytes, b.input_bytes, t);
  for (size_t i = 0; i < a.skip_bytes.size(); ++i)
    p.skip_bytes.push_back(blend(a.skip_bytes[i], b.skip_bytes[i], t));
  return p;
}

double seconds_of(const std::function<void()>& fn, int reps) {
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int64_t ModelCosts::layers() const {
  return profiles.empty() ? 0 : static_cast<int64_t>(profiles[0].layers.size());
}

ModelProfile ModelCosts::at(int64_t rows) const {
  GPIPE_CHECK(!profiles.empty(), "plan: the model costs have no profile");
  GPIPE_CHECK(rows >= 1, "plan: a micro-batch needs at least one example, got ", rows);
  for (const ModelProfile& p : profiles)
    if (p.rows == rows) return p;
  if (profiles.size() == 1) {
    const ModelProfile zero{0, std::vector<LayerProfile>(profiles[0].layers.size()), {}, 0, {}};
    ModelProfile p = blend(zero, profiles[0], static_cast<double>(rows) / profiles[0].rows, rows);
    for (size_t i = 0; i < p.layers.size(); ++i)
      p.layers[i].parameter_bytes = profiles[0].layers[i].parameter_bytes;
    return p;
  }
  size_t hi = 1;
  while (hi + 1 < profiles.size() && profiles[hi].rows < rows) ++hi;
  const ModelProfile &a = profiles[hi - 1], &b = profiles[hi];
  GPIPE_CHECK(a.rows < b.rows,
              "plan: the model costs' profiles must have strictly ascending rows (", a.rows,
              " then ", b.rows, ")");
  return blend(a, b, static_cast<double>(rows - a.rows) / static_cast<double>(b.rows - a.rows),
               rows);
}

int64_t ModelCosts::parameter_bytes(int64_t begin, int64_t end) const {
  std::set<int> seen;
  int64_t n = 0;
  for (int64_t i = begin; i < end && i < static_cast<int64_t>(layer_tensors.size()); ++i)
    for (int t : layer_tensors[i])
      if (seen.insert(t).second) n += tensor_bytes[t];
  return n;
}

int64_t ModelCosts::tensors(int64_t begin, int64_t end) const {
  std::set<int> seen;
  for (int64_t i = begin; i < end && i < static_cast<int64_t>(layer_tensors.size()); ++i)
    seen.insert(layer_tensors[i].begin(), layer_tensors[i].end());
  return static_cast<int64_t>(seen.size());
}

ModelCosts profile_model(const Model& model, const Batch& batch, std::vector<int64_t> rows,
                         int reps) {
  GPIPE_CHECK(!rows.empty(), "profile_model: no micro-batch sizes to profile");
  GPIPE_CHECK(model.loss != nullptr, "profile_model: the model has no loss");
  const int64_t n = batch_size(batch);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  GPIPE_CHECK(rows.front() >= 1 && rows.back() <= n, "profile_model: micro-batches of ",
              rows.front(), " to ", rows.back(), " examples need 1 <= rows <= the batch's ", n);
  ModelCosts c;
  std::map<const void*, int> index;  // storage -> tensor index (tied tensors share one)
  for (const auto& layer : model.layers) {
    std::vector<int> mine;
    for (const NamedTensor& p : layer->parameters()) {
      const void* key = p.tensor->storage().get();
      auto [it, fresh] = index.emplace(key, static_cast<int>(c.tensor_bytes.size()));
      if (fresh) c.tensor_bytes.push_back(static_cast<int64_t>(p.tensor->nbytes()));
      if (std::find(mine.begin(), mine.end(), it->second) == mine.end()) mine.push_back(it->second);
    }
    c.layer_tensors.push_back(mine);
    int64_t buffers = 0;
    for (const NamedTensor& b : layer->buffers())
      buffers += static_cast<int64_t>(b.tensor->nbytes());
    c.layer_buffer_bytes.push_back(buffers);
  }
  c.skips = skip_edges(model.layers);
  for (int64_t r : rows) {
    const Batch piece = split_micro_batches(batch, (n + r - 1) / r)[0];
    ModelProfile p;
    p.rows = batch_size(piece);
    p.input_bytes = bundle_bytes(piece.inputs);
    p.layers = profile_layers(model.layers, piece.inputs, reps, model.loss.get());
    // Each skip's tensor, from the specs (a spec store keeps every stash).
    SkipSpecStore stashed;
    infer_specs(model.layers, spec_of(piece.inputs), nullptr, &stashed);
    for (const SkipEdge& e : c.skips) {
      const TensorSpec t = stashed.pop(e.name, "the planner");
      p.skip_bytes.push_back(t.shape.numel() * static_cast<int64_t>(dtype_size(t.dtype)));
    }
    p.loss = profile_model_loss(model, piece.inputs, piece.targets, reps);
    for (const auto& layer : model.layers) layer->discard_step();
    if (c.profiles.empty() || c.profiles.back().rows != p.rows) c.profiles.push_back(p);
  }
  c.describe =
      detail::concat("profiled on ",
                     model.layers.empty() || batch.inputs.empty() ? std::string("cpu")
                                                                  : batch.inputs[0].device().str(),
                     " at micro-batches of ");
  for (size_t i = 0; i < c.profiles.size(); ++i)
    c.describe += detail::concat(i ? ", " : "", c.profiles[i].rows);
  c.describe += " examples";
  return c;
}

namespace {

// One forward, loss and backward of `m` on `b`; the parameters' gradients dropped after.
void training_pass(const Model& m, const Batch& b) {
  backward({mean_loss(m, b.inputs, b.targets)});  // as a pipeline computes it (fused output loss)
  for (const auto& layer : m.layers) {
    for (const NamedTensor& p : layer->parameters()) p.tensor->zero_grad();
    layer->discard_step();
  }
}

}  // namespace

double measure_concurrency(const Model& model, const Model& other, const Batch& batch, int64_t rows,
                           int threads) {
  GPIPE_CHECK(rows >= 1 && rows <= batch_size(batch), "measure_concurrency: ", rows,
              " rows of a batch of ", batch_size(batch));
  const Batch piece = split_micro_batches(batch, (batch_size(batch) + rows - 1) / rows)[0];
  ThreadPool pool(threads);
  IntraOpScope scope(&pool);
  training_pass(model, piece);  // warm-up
  const double alone = seconds_of([&] { training_pass(model, piece); }, 2);
  std::atomic<bool> stop{false}, started{false};
  std::exception_ptr failure;
  std::thread load([&] {
    try {
      ThreadPool own(threads);
      IntraOpScope s(&own);
      while (!stop.load()) {
        training_pass(other, piece);
        started = true;
      }
    } catch (...) {
      failure = std::current_exception();
      started = true;
    }
  });
  struct Joiner {  // stops and joins the load thread however this returns
    std::atomic<bool>& stop;
    std::thread& t;
    ~Joiner() {
      stop = true;
      t.join();
    }
  };
  double together = 0;
  {
    Joiner joiner{stop, load};
    while (!started.load()) std::this_thread::yield();
    if (!failure) together = seconds_of([&] { training_pass(model, piece); }, 2);
  }
  if (failure) std::rethrow_exception(failure);
  return std::max(1.0, together / alone);
}

void measure_link(Device from, Device to, double* latency_seconds, double* bytes_per_second) {
  const int64_t small = 1024, big = 4 << 20;  // floats
  const Tensor a = Tensor::full(Shape{small}, 1, DType::kFloat32, from);
  const Tensor b = Tensor::full(Shape{big}, 1, DType::kFloat32, from);
  NoGradGuard no_grad;
  const double ts = seconds_of([&] { (void)a.to(to); }, 20);
  const double tb = seconds_of([&] { (void)b.to(to); }, 5);
  const double bytes = 4.0 * (big - small);
  *bytes_per_second = tb > ts ? bytes / (tb - ts) : 0;
  *latency_seconds =
      std::max(0.0, ts - (*bytes_per_second > 0 ? 4.0 * small / *bytes_per_second : 0));
}

// ---- choices ---------------------------------------------------------------------

}  // namespace gpipe
