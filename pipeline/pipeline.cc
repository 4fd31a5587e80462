// The executor. Each stage has one DeviceWorker thread that walks its task
// list from the schedule; forward tasks wait for the previous stage's
// activations, backward tasks for the next stage's gradients, both through
// keyed Mailboxes. A failure in any task aborts every mailbox, so all other
// workers stop waiting, and the step reports the first real error with its
// stage and micro-batch on the caller's thread (Invariant 5: nothing hangs).
#include "pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/rng.h"
#include "ops/ops.h"

namespace gpipe {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Bundle to_device(const Bundle& b, Device d) {
  NoGradGuard no_grad;
  Bundle out;
  for (const Tensor& t : b) out.push_back(t.defined() ? t.to(d).detach() : t);
  return out;
}

// Forward + backward seconds of each layer on `inputs` (balance_by = time).
std::vector<double> profile_layers(const LayerList& layers, Bundle x) {
  std::vector<double> secs;
  for (const auto& layer : layers) {
    double best = 1e300;
    Bundle next;
    for (int rep = 0; rep < 2; ++rep) {
      Bundle leaves;
      for (const Tensor& t : x) {
        Tensor l = t.detach();
        if (is_floating(l.dtype())) l.set_requires_grad(true);
        leaves.push_back(l);
      }
      const auto t0 = std::chrono::steady_clock::now();
      Bundle out = layer->forward(leaves);
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
  }
  return secs;
}

std::string task_name(const Task& t) {
  return std::string(t.kind == TaskKind::kForward ? "forward" : "backward") + " of micro-batch " +
         std::to_string(t.micro_batch);
}

}  // namespace

BalanceBy parse_balance_by(const std::string& name) {
  if (name == "cost") return BalanceBy::kCost;
  if (name == "time") return BalanceBy::kTime;
  if (name == "memory") return BalanceBy::kMemory;
  throw Error(detail::concat("unknown balance-by '", name, "' (expected cost, time or memory)"));
}

Pipeline::Pipeline(Model model, PipelineOptions options, const Batch& sample) : opt_(std::move(options)), model_(std::move(model)) {
  GPIPE_CHECK(!model_.layers.empty(), "pipeline: the model has no layers");
  GPIPE_CHECK(model_.loss != nullptr, "pipeline: the model has no loss");
  GPIPE_CHECK(opt_.micro_batches >= 1, "pipeline: M (micro-batches) must be >= 1, got ", opt_.micro_batches);
  GPIPE_CHECK(opt_.timeout_seconds > 0, "pipeline: timeout must be positive, got ", opt_.timeout_seconds);
  if (!opt_.balance.empty()) {
    GPIPE_CHECK(opt_.partitions == 1 || opt_.partitions == static_cast<int>(opt_.balance.size()), "pipeline: --balance has ",
                opt_.balance.size(), " cells but K = ", opt_.partitions);
    opt_.partitions = static_cast<int>(opt_.balance.size());
  }
  const int k = opt_.partitions;
  GPIPE_CHECK(k >= 1, "pipeline: K (partitions) must be >= 1, got ", k);
  std::set<std::string> names;
  for (const auto& l : model_.layers)
    GPIPE_CHECK(names.insert(l->name()).second, "pipeline: two layers are named '", l->name(),
                "'; layer names must be unique (they name parameters in checkpoints)");

  // Costs, from the shapes of one micro-batch of the sample.
  const std::vector<Batch> sample_micro = split_micro_batches(sample, std::min<int64_t>(opt_.micro_batches, batch_size(sample)));
  std::vector<BundleSpec> specs;
  const BundleSpec final_spec = infer_specs(model_.layers, spec_of(sample_micro[0].inputs), &specs);
  specs.push_back(final_spec);
  std::vector<double> costs;
  if (opt_.balance_by == BalanceBy::kTime && opt_.balance.empty()) {
    costs = profile_layers(model_.layers, sample_micro[0].inputs);
  } else {
    for (size_t i = 0; i < model_.layers.size(); ++i) {
      if (opt_.balance_by == BalanceBy::kMemory) {
        double bytes = 4.0 * static_cast<double>(model_.layers[i]->parameter_count()) * 4;  // params, grads, 2 Adam moments
        for (const TensorSpec& t : specs[i + 1]) bytes += static_cast<double>(t.shape.numel() * dtype_size(t.dtype));
        costs.push_back(bytes);
      } else {
        costs.push_back(model_.layers[i]->cost(specs[i]));
      }
    }
  }
  partition_ = opt_.balance.empty() ? balanced_partition(costs, k) : explicit_partition(opt_.balance, costs);

  // Devices.
  if (opt_.devices.empty()) opt_.devices = devices("cpu", k);
  GPIPE_CHECK(opt_.devices.size() == 1 || static_cast<int>(opt_.devices.size()) == k, "pipeline: got ",
              opt_.devices.size(), " devices for K = ", k, " cells (give K devices, or one for all cells)");
  for (int s = 0; s < k; ++s) stage_devices_.push_back(opt_.devices.size() == 1 ? opt_.devices[0] : opt_.devices[s]);

  // Placement. A parameter used by several cells (tied weights) gets its own
  // copy in every cell after the first, even on a shared device, so no two
  // workers ever accumulate into one tensor; sync_tied_gradients sums them.
  std::unordered_map<TensorImpl*, std::vector<int>> stages_of;
  std::vector<std::vector<std::pair<TensorImpl*, Tensor*>>> slots(k);
  for (int s = 0; s < k; ++s)
    for (int64_t i = partition_.begin(s); i < partition_.end(s); ++i)
      for (auto& p : model_.layers[i]->parameters()) {
        TensorImpl* impl = p.tensor->impl_ptr().get();
        auto& st = stages_of[impl];
        if (st.empty() || st.back() != s) st.push_back(s);
        slots[s].push_back({impl, p.tensor});
      }
  std::map<TensorImpl*, std::vector<Tensor*>> tie_copies;
  for (int s = 0; s < k; ++s) {
    const Device dev = stage_devices_[s];
    std::unordered_map<TensorImpl*, Tensor> placed;  // this cell's tensor for each original
    for (auto& [impl, slot] : slots[s]) {
      auto it = placed.find(impl);
      if (it == placed.end()) {
        const bool tied = stages_of[impl].size() > 1;
        Tensor t = *slot;
        if (t.device() != dev || (tied && stages_of[impl].front() != s)) {
          MemoryCategoryGuard cat(MemoryCategory::kParameter);
          NoGradGuard no_grad;
          t = t.device() != dev ? slot->to(dev).detach() : slot->clone();
          t.set_requires_grad(slot->requires_grad());
        }
        it = placed.emplace(impl, t).first;
        if (tied) tie_copies[impl].push_back(slot);
      }
      *slot = it->second;
    }
    for (int64_t i = partition_.begin(s); i < partition_.end(s); ++i) model_.layers[i]->to(dev);
  }
  for (auto& [impl, copies] : tie_copies) ties_.push_back(copies);

  for (int s = 0; s < k; ++s) {
    LayerList cell(model_.layers.begin() + partition_.begin(s), model_.layers.begin() + partition_.end(s));
    stages_.push_back(std::make_unique<Stage>(s, std::move(cell), partition_.begin(s), stage_devices_[s],
                                              s == k - 1 ? model_.loss : nullptr));
    const int threads = opt_.threads_per_stage > 0
                            ? opt_.threads_per_stage
                            : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / k);
    workers_.push_back(std::make_unique<DeviceWorker>(stage_devices_[s], threads));
    transports_.push_back(std::make_unique<InProcessTransport>());
    if (s + 1 < k) {
      forward_box_.push_back(std::make_unique<Mailbox>("activations from stage " + std::to_string(s) + " to " + std::to_string(s + 1)));
      backward_box_.push_back(std::make_unique<Mailbox>("gradients from stage " + std::to_string(s + 1) + " to " + std::to_string(s)));
    }
  }
  schedule_ = make_schedule(opt_.schedule, k, opt_.micro_batches);
}

Pipeline::~Pipeline() = default;

void Pipeline::run_schedule(const std::vector<Batch>& micro, const StepContext& ctx, bool train) {
  const int k = static_cast<int>(stages_.size());
  const auto timeout = std::chrono::duration<double>(opt_.timeout_seconds);
  for (auto& b : forward_box_) b->reset();
  for (auto& b : backward_box_) b->reset();
  for (auto& s : stages_) s->clear();

  struct Failure {
    int stage = -1;
    Task task{TaskKind::kForward, 0};
    std::string what;
  };
  std::mutex fail_mu;
  Failure failure;
  auto abort_all = [&] {
    for (auto& b : forward_box_) b->abort();
    for (auto& b : backward_box_) b->abort();
  };

  std::vector<std::function<void()>> jobs;
  for (int s = 0; s < k; ++s) {
    jobs.push_back([&, s] {
      Stage& stage = *stages_[s];
      Task current{TaskKind::kForward, 0};
      try {
        for (const Task& t : schedule_[s]) {
          current = t;
          if (!train && t.kind == TaskKind::kBackward) continue;
          const int m = t.micro_batch;
          if (t.kind == TaskKind::kForward) {
            Message in;
            if (s == 0) {
              in.tensors = micro[m].inputs;
              in.requires_grad.assign(in.tensors.size(), false);
            } else {
              in = forward_box_[s - 1]->take(m, timeout);
            }
            const bool remat = train && rematerialises(opt_.remat, m, opt_.micro_batches);
            Message out;
            if (train) {
              out = stage.forward(m, in, micro[m].targets, remat, ctx, &tracer_);
            } else {
              NoGradGuard no_grad;
              out = stage.forward(m, in, micro[m].targets, /*remat=*/true, ctx, &tracer_);
            }
            if (s + 1 < k) {
              const double t0 = tracer_.now_us();
              out.tensors = transports_[s]->send(out.tensors, stage_devices_[s + 1]);
              tracer_.add({"send F" + std::to_string(m), "transfer", s, t0, tracer_.now_us() - t0, m, static_cast<int>(ctx.step)});
              forward_box_[s]->put(m, std::move(out));
            }
          } else {
            Message g;
            if (s + 1 < k) g = backward_box_[s]->take(m, timeout);
            Message gin = stage.backward(m, g, ctx, &tracer_);
            if (s > 0) {
              const double t0 = tracer_.now_us();
              gin.tensors = transports_[s]->send(gin.tensors, stage_devices_[s - 1]);
              tracer_.add({"send B" + std::to_string(m), "transfer", s, t0, tracer_.now_us() - t0, m, static_cast<int>(ctx.step)});
              backward_box_[s - 1]->put(m, std::move(gin));
            }
          }
        }
      } catch (const Aborted&) {
        throw;
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lock(fail_mu);
          if (failure.stage < 0) failure = {s, current, e.what()};
        }
        abort_all();
        throw;
      }
    });
  }
  const auto errors = run_all(workers_, std::move(jobs));
  bool any = false;
  for (auto& e : errors) any = any || e != nullptr;
  if (!any) return;
  // Leave no trace of the failed step: no saved activations, gradients or statistics.
  for (auto& s : stages_) s->clear();
  for (auto& b : forward_box_) b->reset();
  for (auto& b : backward_box_) b->reset();
  if (train) {
    zero_grad();
    for (auto& l : model_.layers) l->discard_step();
  }
  if (failure.stage < 0) {
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }
  throw Error(detail::concat("pipeline step ", ctx.step, " failed in stage ", failure.stage, " (",
                             stage_devices_[failure.stage], ", layers [", partition_.begin(failure.stage), ", ",
                             partition_.end(failure.stage), ")) during ", task_name(failure.task), ": ", failure.what));
}

StepResult Pipeline::train_step(const Batch& batch) {
  const auto t0 = std::chrono::steady_clock::now();
  StepResult r;
  r.examples = batch_size(batch);
  std::vector<Batch> micro = split_micro_batches(batch, opt_.micro_batches);
  for (Batch& b : micro) {
    b.inputs = to_device(b.inputs, stage_devices_.front());
    b.targets = to_device(b.targets, stage_devices_.back());
  }
  r.loss_terms = model_.loss->count(batch.targets);
  StepContext ctx{opt_.seed, step_, opt_.micro_batches, r.loss_terms > 0 ? 1.0 / r.loss_terms : 0.0, opt_.check_finite};
  if (!opt_.trace) tracer_.clear();
  const double trace_from = tracer_.now_us();
  run_schedule(micro, ctx, /*train=*/true);
  sync_tied_gradients();
  for (auto& l : model_.layers) l->finish_step();
  for (int m = 0; m < opt_.micro_batches; ++m) r.loss += stages_.back()->loss(m);
  for (auto& s : stages_) s->clear();
  ++step_;
  r.seconds = seconds_since(t0);
  // Measured bubble: idle share of K x (first start .. last end) of this step's compute.
  double lo = 1e300, hi = 0;
  std::vector<double> busy(stages_.size(), 0.0);
  for (const TraceEvent& e : tracer_.events()) {
    if (e.start_us < trace_from || e.category == "transfer") continue;
    lo = std::min(lo, e.start_us);
    hi = std::max(hi, e.start_us + e.duration_us);
    busy[e.row] += e.duration_us;
  }
  if (hi > lo) {
    double total = 0;
    for (double b : busy) total += b;
    r.bubble_fraction = 1.0 - total / (static_cast<double>(stages_.size()) * (hi - lo));
  }
  return r;
}

double Pipeline::evaluate(const Batch& batch) {
  const int64_t n = batch_size(batch);
  const int m = static_cast<int>(std::min<int64_t>(opt_.micro_batches, n));
  std::vector<Batch> micro = split_micro_batches(batch, m);
  double sum = 0;
  NoGradGuard no_grad;
  const bool was_training = model_.layers.front()->training();
  train(false);
  try {
    for (const Batch& b : micro) {
      Bundle out = predict(b.inputs);
      sum += model_.loss->sum(out, to_device(b.targets, out[0].device())).item();
    }
  } catch (...) {
    train(was_training);
    throw;
  }
  train(was_training);
  const double terms = model_.loss->count(batch.targets);
  return terms > 0 ? sum / terms : 0.0;
}

Bundle Pipeline::predict(const Bundle& inputs) {
  NoGradGuard no_grad;
  // Eval mode for this call (dropout off, BatchNorm on running statistics).
  const bool was_training = model_.layers.front()->training();
  struct RestoreMode {
    Pipeline* p;
    bool on;
    ~RestoreMode() { p->train(on); }
  } restore{this, was_training};
  train(false);
  Bundle x = inputs;
  for (auto& st : stages_) {
    x = to_device(x, st->device());
    int64_t li = partition_.begin(st->index());
    for (const auto& l : st->layers()) {
      RngScope rng({opt_.seed, static_cast<uint64_t>(step_), 0, static_cast<uint64_t>(li++)});
      x = l->forward(x);
    }
  }
  return x;
}

void Pipeline::sync_tied_gradients() {
  NoGradGuard no_grad;
  MemoryCategoryGuard cat(MemoryCategory::kGradient);
  for (auto& copies : ties_) {
    Tensor sum;
    const Device home = copies[0]->device();
    for (Tensor* c : copies) {
      Tensor g = c->grad();
      if (!g.defined()) continue;
      sum = sum.defined() ? ops::add(sum, g.to(home)) : g.to(home).clone();
    }
    if (!sum.defined()) continue;
    for (Tensor* c : copies) c->set_grad(sum.to(c->device()).clone());
  }
}

std::vector<NamedTensor> Pipeline::parameters() {
  std::vector<NamedTensor> out;
  std::unordered_set<TensorImpl*> seen;
  for (auto& l : model_.layers)
    for (auto& p : l->parameters())
      if (seen.insert(p.tensor->impl_ptr().get()).second) out.push_back({l->name() + "." + p.name, p.tensor});
  return out;
}

std::vector<NamedTensor> Pipeline::named_state() {
  std::vector<NamedTensor> out;
  for (auto& l : model_.layers) {
    for (auto& p : l->parameters()) out.push_back({l->name() + "." + p.name, p.tensor});
    for (auto& b : l->buffers()) out.push_back({l->name() + "." + b.name, b.tensor});
  }
  return out;
}

void Pipeline::zero_grad() {
  for (auto& p : parameters()) p.tensor->zero_grad();
}

void Pipeline::train(bool on) {
  for (auto& l : model_.layers) l->train(on);
}

std::vector<CellInfo> Pipeline::cells() const {
  std::vector<CellInfo> out;
  for (size_t s = 0; s < stages_.size(); ++s) {
    int64_t params = 0;
    for (const auto& l : stages_[s]->layers()) params += l->parameter_count();
    out.push_back({partition_.begin(s), partition_.end(s), stage_devices_[s], partition_.cell_costs[s], params});
  }
  return out;
}

std::string Pipeline::describe() const {
  std::ostringstream os;
  const auto cs = cells();
  char line[256];
  const char* cost_label = !opt_.balance.empty() ? "cost (given)"
                           : opt_.balance_by == BalanceBy::kTime ? "seconds"
                           : opt_.balance_by == BalanceBy::kMemory ? "bytes" : "FLOPs";
  std::snprintf(line, sizeof(line), "%-5s %-8s %-12s %-28s %14s %12s %10s\n", "cell", "device", "layers", "first..last",
                cost_label, "parameters", "param MB");
  os << line;
  for (size_t s = 0; s < cs.size(); ++s) {
    const std::string range = "[" + std::to_string(cs[s].first_layer) + ", " + std::to_string(cs[s].last_layer) + ")";
    const std::string names = model_.layers[cs[s].first_layer]->name() + ".." + model_.layers[cs[s].last_layer - 1]->name();
    int64_t bytes = 0;
    std::unordered_set<TensorImpl*> seen;
    for (const auto& l : stages_[s]->layers())
      for (auto& p : l->parameters())
        if (seen.insert(p.tensor->impl_ptr().get()).second) bytes += static_cast<int64_t>(p.tensor->nbytes());
    std::snprintf(line, sizeof(line), "%-5zu %-8s %-12s %-28s %14.4g %12ld %10.2f\n", s, cs[s].device.str().c_str(),
                  range.c_str(), names.c_str(), cs[s].cost, static_cast<long>(cs[s].parameters), bytes / 1048576.0);
    os << line;
  }
  os << "schedule " << schedule_name(opt_.schedule) << ", M = " << opt_.micro_batches << ", remat "
     << remat_name(opt_.remat) << ", ideal bubble " << ideal_bubble_fraction(static_cast<int>(cs.size()), opt_.micro_batches)
     << "\n";
  return os.str();
}

std::vector<DeviceMemory> Pipeline::memory() const {
  std::vector<DeviceMemory> out;
  std::set<std::pair<int, int>> seen;
  for (const Device& d : stage_devices_) {
    if (!seen.insert({static_cast<int>(d.type), d.index}).second) continue;
    const MemoryStats s = allocator_for(d).stats();
    out.push_back({d, s.live_bytes(MemoryCategory::kParameter), s.live_bytes(MemoryCategory::kGradient),
                   s.live_bytes(MemoryCategory::kOptimizerState), s.peak_bytes(MemoryCategory::kActivation), s.peak_total});
  }
  return out;
}

void Pipeline::reset_memory_peaks() {
  for (const Device& d : stage_devices_) allocator_for(d).reset_peak();
}

void Pipeline::write_trace(const std::string& path) const {
  std::vector<std::string> rows;
  for (size_t s = 0; s < stages_.size(); ++s) rows.push_back("stage " + std::to_string(s) + " (" + stage_devices_[s].str() + ")");
  tracer_.write(path, rows);
}

}  // namespace gpipe
