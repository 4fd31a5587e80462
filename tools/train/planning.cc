#include "tools/train/planning.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <set>
#include <thread>

#include "core/parallel.h"
#include "core/precision.h"
#include "optim/adam.h"
#include "optim/rmsprop.h"
#include "optim/sgd.h"
#include "pipeline/microbatch.h"

namespace gpipe::train {

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c,
                                                 std::vector<NamedTensor> params) {
  const double lr = *c.lr, wd = c.weight_decay.value_or(0), momentum = c.momentum.value_or(0);
  if (c.optimizer == "adam")
    return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = lr, .weight_decay = wd});
  if (c.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(params, optim::AdamOptions{.lr = lr, .weight_decay = wd});
  if (c.optimizer == "rmsprop")
    return std::make_unique<optim::RmsProp>(
        params, optim::RmsPropOptions{.lr = lr, .momentum = momentum, .weight_decay = wd});
  return std::make_unique<optim::Sgd>(
      params, optim::SgdOptions{
                  .lr = lr, .momentum = momentum, .weight_decay = wd, .nesterov = momentum > 0});
}

double optimizer_state_factor(const TrainConfig& c) {
  const bool momentum = c.momentum.value_or(0) > 0;
  if (c.optimizer == "adam" || c.optimizer == "adamw") return 2;
  if (c.optimizer == "rmsprop") return momentum ? 2 : 1;
  return momentum ? 1 : 0;
}

std::vector<int> candidate_micro_batches(int64_t batch) {
  std::vector<int> out;
  for (int64_t m = 1; m <= std::min<int64_t>(batch, 64); m *= 2) out.push_back(static_cast<int>(m));
  return out;
}

ModelCosts training_costs(const TrainConfig& c, Model& model, const Batch& batch,
                          const std::vector<int>& ms, const Model* other, int threads) {
  const int64_t n = batch_size(batch);
  std::vector<int64_t> rows;
  for (int m : ms) rows.push_back(micro_batch_sizes(n, std::min<int64_t>(m, n))[0]);
  ModelCosts costs;
  {
    // Under --precision=bf16 / fp16 the layers' activations, boundaries and
    // products are 16-bit: profile them that way (parameters, gradients and
    // optimizer state stay float32).
    PrecisionScope precision(parse_precision(c.precision));
    costs = profile_model(model, batch, rows);
  }
  costs.optimizer_state_factor = optimizer_state_factor(c);
  // One optimizer step over zero gradients (the arithmetic does not depend
  // on the values), best of three, then the gradients and state are dropped.
  std::vector<NamedTensor> params;  // each tensor once (tied ones are shared), named uniquely
  std::set<const void*> seen;
  for (size_t i = 0; i < model.layers.size(); ++i)
    for (const NamedTensor& p : model.layers[i]->parameters())
      if (seen.insert(p.tensor->storage().get()).second)
        params.push_back({detail::concat("layer", i, ".", p.name), p.tensor});
  for (const NamedTensor& p : params)
    p.tensor->set_grad(Tensor::zeros(p.tensor->shape(), p.tensor->dtype(), p.tensor->device()));
  {
    std::unique_ptr<optim::Optimizer> opt = make_optimizer(c, params);
    double best = 1e300;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      opt->step();
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    costs.optimizer_seconds = best;
  }
  for (const NamedTensor& p : params) p.tensor->zero_grad();
  measure_link(Device{DeviceType::kCPU, 0}, Device{DeviceType::kCPU, 1},
               &costs.link_latency_seconds, &costs.link_bytes_per_second);
  if (other) {
    costs.concurrency_factor =
        measure_concurrency(model, *other, batch, rows[rows.size() / 2], std::max(1, threads));
    char factor[32];
    std::snprintf(factor, sizeof factor, "%.3f", costs.concurrency_factor);
    costs.describe +=
        detail::concat("; two devices computing at once run ", factor, "x slower each");
  }
  return costs;
}

PlanRequest plan_request(const TrainConfig& c, const std::vector<int>& ms) {
  PlanRequest r;
  r.K = c.K;
  r.batch = c.batch;
  r.memory_bytes = c.memory.empty() ? 0 : parse_bytes(c.memory);
  r.M = ms;
  return r;
}

// --plan=auto and --balance-by=plan: profile a fresh copy of the model on
// the first batch, search, and set the pipeline's cuts (and with auto M,
// the schedule and each cell's remat) to the best plan.
void apply_plan(TrainConfig& c, const Task& task, bool distributed, std::ostream& log,
                PipelineOptions& po) {
  const bool autoplan = !c.plan.empty();
  const char* flag = autoplan ? "--plan=auto" : "--balance-by=plan";
  if (distributed)
    throw UsageError(detail::concat(
        flag,
        ": plans in one process only (under mpirun every rank would profile on its own and "
        "could choose differently); run gpipe_plan once and give every rank its choice "
        "(--M, --schedule, --remat, --balance)"));
  if (!autoplan && c.schedule.rfind("file:", 0) == 0)
    throw UsageError(
        "--balance-by=plan: cuts are planned for a built-in --schedule, not a "
        "program from a file; give --balance with the file's program");
  const auto t0 = std::chrono::steady_clock::now();
  Model fresh = task.make_model();
  const std::vector<int> ms = autoplan ? candidate_micro_batches(c.batch) : std::vector<int>{c.M};
  Model other;  // a second copy: how much two devices computing at once slow each other
  if (c.K > 1) other = task.make_model();
  // Profiled with the threads one stage gets (threads_per_stage: --threads, or cores / K).
  const int stage_threads =
      c.threads > 0 ? c.threads
                    : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / c.K);
  ThreadPool stage_pool(stage_threads);
  IntraOpScope scope(&stage_pool);
  const ModelCosts costs =
      training_costs(c, fresh, task.batch_at(0), ms, c.K > 1 ? &other : nullptr, stage_threads);
  const PlanRequest req = plan_request(c, ms);
  PlanEstimate best;
  if (autoplan) {
    const PlanResult r = make_plan(costs, req);
    log << "plan: " << costs.describe << "\n" << format_plan(r, req.memory_bytes, 8);
    if (r.plans.empty())
      throw UsageError(detail::concat(
          "--plan=auto: no plan for K=", c.K, " and --batch=", c.batch, " fits ",
          req.memory_bytes > 0 ? "--memory=" + c.memory : std::string("in memory"),
          r.rejected.empty() ? std::string()
                             : "; e.g. " + r.rejected[0].choice + ": " + r.rejected[0].why));
    best = r.plans[0];
    po.M = c.M = best.choice.M;
    po.schedule = best.choice.schedule;
    c.schedule = schedule_name(best.choice.schedule);
    po.virtual_stages = c.virtual_stages = best.choice.virtual_stages;
    po.remat = best.choice.remat[0];  // the program (custom_schedule) has each cell's own
    c.remat = (best.choice.uniform_remat() ? "" : "per cell ") + best.choice.remat_text();
    po.custom_schedule = std::make_shared<Schedule>(best.program);
  } else {
    PlanChoice ch;
    ch.schedule = po.schedule;
    ch.K = c.K;
    ch.M = c.M;
    ch.virtual_stages = c.virtual_stages;
    ch.order_latency =
        std::max(0.0, c.order_latency);  // --order-latency, or free links until measured
    ch.remat.assign(ch.cells(), po.remat);
    best = best_cut(costs, ch, c.batch, req.memory_bytes);
    for (size_t d = 0; d < best.memory.size(); ++d)
      if (req.memory_bytes > 0 && best.memory[d].total() > req.memory_bytes)
        throw UsageError(detail::concat("--balance-by=plan: no cut of ", ch.describe(),
                                        " fits --memory=", c.memory, ": device ", d,
                                        " needs at least ", format_bytes(best.memory[d].total())));
  }
  po.balance = best.choice.balance();
  std::string mem;
  for (const DeviceMemoryPrediction& d : best.memory)
    mem += detail::concat(mem.empty() ? "" : " ", format_bytes(d.total()));
  log << "plan: " << best.choice.describe() << ": predicted step "
      << format_seconds(best.step_seconds) << ", bubble " << best.sim.bubble_fraction
      << ", memory per device " << mem << " (planned in "
      << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s)\n";
}

}  // namespace gpipe::train
