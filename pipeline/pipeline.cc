// The Pipeline: builds the ranks (one stage of one replica each) and runs
// every step, evaluation and prediction as a program on them. In one
// process every stage is a rank — a thread on its DeviceWorker with a
// LocalGroup communicator; in a multi-process job this process is one rank
// (MPI). Both run the same StageExecutor over the same program.
#include "pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/precision.h"
#include "ops/ops.h"
#include "pipeline/placement.h"

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

}  // namespace

Pipeline::Pipeline(Model model, PipelineOptions options, const Batch& sample)
    : Pipeline(std::move(model), resolve(std::move(options)), sample) {}

Pipeline::Pipeline(Model model, ResolvedOptions resolved, const Batch& sample)
    : opt_(std::move(resolved.options)), model_(std::move(model)) {
  GPIPE_CHECK(!model_.layers.empty(), "pipeline: the model has no layers");
  GPIPE_CHECK(model_.loss != nullptr, "pipeline: the model has no loss");
  GPIPE_CHECK(opt_.replicas == 1 || opt_.world != nullptr, "pipeline: R = ", opt_.replicas,
              " replicas need one process per stage and replica (launch with mpirun -np K*R)");
  const int v = opt_.virtual_stages;
  const int k = opt_.K * v;  // cells; opt_.K devices
  std::set<std::string> names;
  for (const auto& l : model_.layers) {
    GPIPE_CHECK(names.insert(l->name()).second, "pipeline: two layers are named '", l->name(),
                "'; layer names must be unique (they name parameters in checkpoints)");
    layer_names_.push_back(l->name());
  }
  skip_edges(model_.layers);  // every stash popped once by a later layer, or a clear error
  // The program, checked by resolve() before anything is built.
  schedule_ = *resolved.program;
  dry_run_ = std::move(resolved.dry_run);
  // Under MPI each cell is a process; NCCL takes one rank per GPU.
  if (opt_.world && schedule_.device_count() < k)
    for (const Device& dev : opt_.devices)
      GPIPE_CHECK(dev.is_cpu(), "pipeline: the program puts ", v,
                  " cells on each device and every cell is its own rank (a process under "
                  "mpirun), but ",
                  dev,
                  " is a GPU: NCCL allows one rank per GPU (run cells that share GPUs in one "
                  "process without a world communicator, or use a schedule with one cell per "
                  "device)");

  info_ = rank_info_for(0, k, 1, opt_.layout);
  info_.world_size = 1;
  who_ = "pipeline";
  if (opt_.world) {
    const int size = opt_.world->size();
    GPIPE_CHECK(size == k * opt_.replicas, "pipeline: the job has ", size, " processes but ",
                v > 1 ? "K x v x R = " : "K x R = ",
                v > 1 ? detail::concat(opt_.K, " x ", v) : std::to_string(k), " x ", opt_.replicas,
                " = ", k * opt_.replicas, " (run mpirun -np ", k * opt_.replicas,
                ", or change --K/--replicas", v > 1 ? "/--virtual" : "", ")");
    info_ = rank_info_for(opt_.world->rank(), k, opt_.replicas, opt_.layout);
    who_ = detail::concat("rank ", info_.world_rank, " (stage ", info_.stage, " of ", k,
                          ", replica ", info_.replica, " of ", opt_.replicas, ")");
  }
  partition_ = opt_.balance.empty() ? balanced_partition(measure_costs(sample), k)
                                    : explicit_partition(opt_.balance, measure_costs(sample));

  if (opt_.devices.empty()) opt_.devices = devices("cpu", opt_.K);
  // The program places the cells (interleaved: s mod K; ZB-V: a V).
  for (int s = 0; s < k; ++s)
    stage_devices_.push_back(opt_.devices.size() == 1 ? opt_.devices[0]
                                                      : opt_.devices[schedule_.device_of(s)]);
  for (int s = 0; s < k; ++s) {
    int64_t params = 0, bytes = 0;
    std::unordered_set<TensorImpl*> seen;  // a tensor tied within the cell counts once in the bytes
    for (int64_t i = partition_.begin(s); i < partition_.end(s); ++i) {
      params += model_.layers[i]->parameter_count();
      for (auto& p : model_.layers[i]->parameters())
        if (seen.insert(p.tensor->impl_ptr().get()).second)
          bytes += static_cast<int64_t>(p.tensor->nbytes());
    }
    cells_.push_back({partition_.begin(s), partition_.end(s), stage_devices_[s],
                      partition_.cell_costs[s], params});
    cell_param_bytes_.push_back(bytes);
  }
  build_ranks();
  build_order_for_link(sample);
}

// In a multi-process job rank 0's bytes on every rank (so every rank cuts
// the model alike); in one process there is nobody to share with.
void Pipeline::share_from_rank0(std::string& bytes, const char* what) {
  if (opt_.world) opt_.world->broadcast(bytes, 0, what);
}

// Costs, from the shapes of one micro-batch of the sample. In a
// multi-process job only the first stage has inputs: rank 0 shares their
// shapes (the others need no values), and measured times.
std::vector<double> Pipeline::measure_costs(const Batch& sample) {
  Message m;
  if (info_.world_rank == 0) m.tensors = sample.inputs;
  std::string header = encode_header(m);
  share_from_rank0(header, "sharing the sample batch's shapes");
  const Batch shaped =
      info_.world_rank == 0 ? sample : Batch{decode_header(header, kCpu).tensors, {}};
  const std::vector<Batch> sample_micro =
      split_micro_batches(shaped, std::min<int64_t>(opt_.M, batch_size(shaped)));
  std::vector<BundleSpec> specs;
  const BundleSpec final_spec = infer_specs(model_.layers, spec_of(sample_micro[0].inputs), &specs);
  specs.push_back(final_spec);  // [input of layer 0, ..., the model's output]
  // Explicit cells are not cut by these costs; they are only reported, so nothing is timed for
  // them.
  const BalanceBy by = opt_.balance_by == BalanceBy::kTime && !opt_.balance.empty()
                           ? BalanceBy::kCost
                           : opt_.balance_by;
  std::vector<double> costs;
  if (by != BalanceBy::kTime || info_.world_rank == 0) {
    PrecisionScope precision(opt_.precision);  // timed layers run as the stages will run them
    costs = layer_costs(model_.layers, specs, by, sample_micro[0].inputs);
  }
  if (by == BalanceBy::kTime) {
    std::string bytes(reinterpret_cast<const char*>(costs.data()), costs.size() * sizeof(double));
    share_from_rank0(bytes, "sharing the measured layer times");
    costs.resize(bytes.size() / sizeof(double));
    std::memcpy(costs.data(), bytes.data(), bytes.size());
  }
  return costs;
}

// A rank's failure outside its program (cutting its micro-batches, a sum
// after the program) is recorded like one inside it, so the other local
// ranks are woken instead of waiting for it until the timeout. A non-finite
// loss is not: every rank finds it alike.
void Pipeline::guarded(StageExecutor& r, const std::function<void()>& fn, const char* action) {
  try {
    fn();
  } catch (const Aborted&) {
    throw;
  } catch (const NonFiniteError&) {
    throw;
  } catch (const std::exception& e) {
    failures_->record(r.info().stage, action, e);
    throw;
  }
}

std::string Pipeline::failure_message(const std::string& label) const {
  const int s = failures_->stage();
  return detail::concat(label, " failed in ", opt_.world ? who_ + ", " : std::string(), "stage ", s,
                        " (", stage_devices_[s], ", layers [", partition_.begin(s), ", ",
                        partition_.end(s), ")) during ", failures_->action(), ": ",
                        failures_->what());
}

void Pipeline::on_ranks(const std::function<void(StageExecutor&)>& fn, const char* action) {
  failures_->clear();
  std::vector<std::function<void()>> jobs;
  for (auto& r : ranks_)
    jobs.push_back([this, &fn, action, ex = r.get()] {
      guarded(
          *ex, [&] { fn(*ex); }, action);
    });
  const std::vector<std::exception_ptr> errors = run_all(workers_, std::move(jobs));
  if (failures_->any() || holds_whole_pipeline())
    for (const auto& e : errors)
      if (e) {
        control_->resume();
        break;
      }
  std::exception_ptr first;
  for (const auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const Aborted&) {
      if (!first) first = e;
    } catch (...) {
      std::rethrow_exception(e);  // a real failure before any Aborted it caused
    }
  }
  if (first) std::rethrow_exception(first);
}

// Rank r's micro-batches when the job cuts the batch's n rows into `pieces`
// (R x M for a step): its replica's share (or all rows when !by_replica),
// the inputs on the first stage's device, the targets on the last's. Other
// stages get empty batches (they only need the count). `rows` and `terms`
// (the loss's divisor, last stage) describe the share; without `terms`
// the last stage takes no targets (prediction).
std::vector<Batch> Pipeline::micro_for(const StageExecutor& r, const Batch& batch, int64_t n,
                                       int pieces, bool by_replica, int64_t* rows,
                                       double* terms) const {
  const RankInfo& ri = r.info();
  const int replica = by_replica ? ri.replica : 0, replicas = by_replica ? ri.replicas : 1;
  const int count = replica_pieces(pieces, replica, replicas);
  const bool first = ri.stage == 0,
             last = ri.stage == ri.cells - 1 && terms != nullptr;  // predict needs no targets
  std::vector<Batch> micro(count);
  if (!(first || last) || count == 0) return micro;
  GPIPE_CHECK(!first || !batch.inputs.empty(), who_, ": the first stage needs the batch's inputs");
  GPIPE_CHECK(!last || !batch.targets.empty(), who_, ": the last stage needs the batch's targets");
  const ReplicaShare sh = replica_share(n, pieces, replica, replicas);
  Batch mine{first ? batch.inputs : Bundle{}, last ? batch.targets : Bundle{}};
  for (Tensor& t : mine.inputs) t = ops::narrow(t, 0, sh.begin, sh.len);
  for (Tensor& t : mine.targets) t = ops::narrow(t, 0, sh.begin, sh.len);
  micro = split_micro_batches(mine, count);
  const Device dev = r.stage().device();
  for (Batch& b : micro) {
    b.inputs = to_device(b.inputs, dev);
    b.targets = to_device(b.targets, dev);
  }
  if (rows) *rows = sh.len;
  if (terms && last) *terms = model_.loss->count(mine.targets);
  return micro;
}

// The batch's row count; in a multi-process job stage 0's, for the stages
// that may have been given no tensors to count (evaluation and prediction
// programs depend on it).
int64_t Pipeline::rows_from_first_stage(StageExecutor& r, const Batch& batch) {
  const bool any = !batch.inputs.empty() || !batch.targets.empty();
  const int64_t n = any ? batch_size(batch) : 0;
  if (holds_whole_pipeline()) return n;
  std::string bytes = std::to_string(n);
  r.pipe().broadcast(bytes, 0, "sharing the batch's size");
  return std::stoll(bytes);
}

std::vector<StepTotals> Pipeline::run_ranks(const std::function<StepTotals(StageExecutor&)>& body,
                                            bool training, const std::string& label) {
  for (auto& r : ranks_) r->reset_links();
  failures_->clear();
  std::vector<StepTotals> out(ranks_.size());
  std::vector<std::function<void()>> jobs;
  for (size_t i = 0; i < ranks_.size(); ++i)
    jobs.push_back([&, i] {
      guarded(
          *ranks_[i], [&] { out[i] = body(*ranks_[i]); }, "the run's setup or final sums");
    });
  const std::vector<std::exception_ptr> errors = run_all(workers_, std::move(jobs));
  std::exception_ptr first;
  for (const auto& e : errors)
    if (e && !first) first = e;
  if (!first) {
    if (!training)
      for (auto& r : ranks_)
        r->stage().clear();  // outputs were taken; drop the last stage's leaves
    return out;
  }
  // Leave no trace of the failed run: no saved activations, messages, gradients or statistics.
  for (auto& r : ranks_) {
    r->stage().clear();
    if (holds_whole_pipeline()) r->drop_pending();
  }
  // Every local rank is out of its collectives now. A group this Pipeline
  // owns is reset after any failure (a timed-out collective included); a
  // shared one only when we cancelled it.
  if (failures_->any() || holds_whole_pipeline()) control_->resume();
  if (training) {
    zero_grad();
    for (auto& l : model_.layers) l->discard_step();
  }
  if (!failures_->any()) {
    for (const auto& e : errors) {
      if (!e) continue;
      try {
        std::rethrow_exception(e);
      } catch (const Aborted&) {
      } catch (...) {
        throw;
      }
    }
    std::rethrow_exception(first);
  }
  const std::string msg = failure_message(label);
  if (failures_->non_finite()) throw NonFiniteError(msg);
  throw Error(msg);
}

StepResult Pipeline::train_step(const Batch& batch) {
  const auto t0 = std::chrono::steady_clock::now();
  watchdog_->start_step(step_);
  struct EndStep {
    Watchdog* w;
    ~EndStep() { w->end_step(); }
  } end_step{watchdog_.get()};
  const int m = opt_.M, replicas = opt_.replicas;
  if (!opt_.trace) tracer_.clear();
  const double trace_from = tracer_.now_us();
  auto body = [&](StageExecutor& r) {
    const RankInfo& ri = r.info();
    const bool last = ri.stage == ri.cells - 1;
    int64_t n = 0;
    if (ri.stage == 0 || last) {
      n = batch_size(batch);
      GPIPE_CHECK(replicas == 1 || n >= replicas * m, "pipeline: a batch of ", n,
                  " examples cannot feed R x M = ", replicas, " x ", m,
                  " micro-batches (expected at least ", replicas * m, " examples)");
    }
    int64_t rows = 0;
    double terms = 0;
    const std::vector<Batch> micro =
        micro_for(r, batch, n, replicas * m, /*by_replica=*/true, &rows, &terms);
    // The loss is scaled by 1 / (terms of the whole job's mini-batch): Note [Micro-batch
    // weighting].
    double all_terms = terms;
    if (last && replicas > 1)
      r.replicas().allreduce(&all_terms, 1, ReduceOp::kSum,
                             "summing the loss terms of all replicas");
    const StepContext ctx{opt_.seed,      step_,
                          ri.replica * m, all_terms > 0 ? loss_scale_ / all_terms : 0.0,
                          nullptr,        opt_.precision};
    const StepTotals t =
        r.run(schedule_.stages[ri.stage], true, micro, ctx, {0, terms, static_cast<double>(rows)});
    if (opt_.check_finite && !std::isfinite(t.loss))
      throw NonFiniteError(detail::concat("pipeline step ", step_ + 1, ": the loss is not finite (",
                                          t.loss / loss_scale_, ")"));
    return t;
  };
  const std::vector<StepTotals> totals =
      run_ranks(body, true, detail::concat("pipeline step ", step_ + 1));
  for (auto& l : model_.layers) l->finish_step();
  for (auto& r : ranks_) r->stage().clear();
  ++step_;
  StepResult res;
  res.loss = totals.front().loss / loss_scale_;
  res.loss_terms = totals.front().terms;
  res.examples = static_cast<int64_t>(totals.front().examples);
  res.seconds = seconds_since(t0);
  // Measured bubble: the idle share of (local stages) x (step start .. last
  // compute end); transfers and reductions count as idle.
  double hi = trace_from, busy = 0;
  for (const TraceEvent& e : tracer_.events()) {
    if (e.start_us < trace_from || e.category == "transfer" || e.category == "reduce") continue;
    hi = std::max(hi, e.start_us + e.duration_us);
    busy += e.duration_us;
  }
  // Devices: the cells of an interleaved or ZB-V program share theirs.
  const double devices = holds_whole_pipeline() ? schedule_.device_count() : ranks_.size();
  if (hi > trace_from) res.bubble_fraction = 1.0 - busy / (devices * (hi - trace_from));
  if (opt_.world && schedule_.device_count() < schedule_.cells()) {
    // One cell per process: the device's idle share needs its other cells'
    // busy time (each process measures the step's span on its own clock).
    // The step is done: a failure here leaves this cell's own figure.
    double sums[2] = {busy, hi - trace_from};
    try {
      on_ranks([&](StageExecutor& r) {
        r.pipe().allreduce(&sums[0], 1, ReduceOp::kSum, "summing the cells' busy time");
        r.pipe().allreduce(&sums[1], 1, ReduceOp::kMax, "the step's longest span");
      });
      if (sums[1] > 0) res.bubble_fraction = 1.0 - sums[0] / (schedule_.device_count() * sums[1]);
    } catch (const std::exception&) {
    }
  }
  return res;
}

double Pipeline::grad_norm() {
  std::vector<double> norms(ranks_.size());
  on_ranks([&](StageExecutor& r) { norms[r.row()] = r.grad_norm(); });
  return norms.front();
}

void Pipeline::set_loss_scale(double s) {
  GPIPE_CHECK(std::isfinite(s) && s > 0, "set_loss_scale: expected a positive finite scale, got ",
              s);
  loss_scale_ = s;
}

void Pipeline::scale_grads(double factor) {
  NoGradGuard no_grad;
  for (auto& p : parameters()) {
    Tensor g = p.tensor->grad();
    if (g.defined()) g.copy_from(ops::mul_scalar(g, factor));
  }
}

double Pipeline::clip_grad_norm(double max_norm) {
  GPIPE_CHECK(max_norm > 0 && std::isfinite(max_norm),
              "clip_grad_norm: max_norm must be positive and finite, got ", max_norm);
  const double norm = grad_norm();
  if (std::isfinite(norm) && norm > max_norm) scale_grads(max_norm / (norm + 1e-6));
  return norm;
}

std::vector<NamedTensor> Pipeline::parameters() { return named_parameters(model_.layers); }

std::vector<NamedTensor> Pipeline::named_state() { return gpipe::named_state(model_.layers); }

void Pipeline::zero_grad() {
  for (auto& p : parameters()) p.tensor->zero_grad();
}

void Pipeline::train(bool on) {
  for (auto& l : model_.layers) l->train(on);
}

}  // namespace gpipe
