// gpipe_plan --validate: the planner's predictions against measured runs of
// W3's model here (one fresh process per run, as every benchmark), for each
// K, M, remat mode and schedule; the cut is the measured run's, so the rows
// test the simulator and the costs, not the search.
#include "pipeline/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/parallel.h"
#include "tools/bench/benchmarks.h"
#include "tools/bench/common.h"
#include "tools/train/planning.h"

namespace gpipe::bench {
namespace {

// "[0, 9) [9, 19)" -> {0, 9, 19}
std::vector<int64_t> bounds_of(const std::string& partition) {
  std::vector<int64_t> b;
  std::istringstream is(partition);
  char open = 0, comma = 0, close = 0;
  int64_t lo = 0, hi = 0;
  while (is >> open >> lo >> comma >> hi >> close) {
    if (b.empty()) b.push_back(lo);
    b.push_back(hi);
  }
  GPIPE_CHECK(b.size() >= 2, "validate: cannot read the partition '", partition, "'");
  return b;
}

// "cpu:0=123 cpu:1=456" -> {123, 456}
std::vector<double> per_device(const std::string& text) {
  std::vector<double> out;
  std::istringstream is(text);
  std::string item;
  while (is >> item) out.push_back(std::stod(item.substr(item.find('=') + 1)));
  return out;
}

double error_of(double predicted, double measured) {
  return measured > 0 ? predicted / measured - 1 : 0;
}

struct Config {
  int k, m;
  std::string remat, schedule;
};

// W3 at K = 2, M = 8, no remat: the partitioner's cost-balanced cut against
// the planner's (by simulated step time), each as pipeline efficiency
// t(K = 1) / (2 t(K = 2)); the runs alternate, medians of the rounds.
void compare_cuts(const PlanValidateOptions& o, MeasureOptions base, const ModelCosts& costs) {
  base.M = 8;
  base.remat = "never";
  base.schedule = "gpipe";
  base.warmup = o.warmup;
  base.steps = o.steps;
  base.max_seconds = o.max_seconds;
  PlanChoice ch;
  ch.K = 2;
  ch.M = 8;
  ch.remat.assign(2, RematMode::kNever);
  const PlanEstimate planned = best_cut(costs, ch, o.batch, 0);
  const std::string balance = planned.choice.balance_text();
  std::vector<double> one, by_cost, by_plan;
  std::string cost_partition;
  for (int round = 0; round < o.rounds; ++round) {
    MeasureOptions k1 = base, k2 = base;
    k1.K = 1;
    k2.K = 2;
    one.push_back(json_number(measure_in_child(k1), "median_s"));
    const std::string c = measure_in_child(k2);
    by_cost.push_back(json_number(c, "median_s"));
    cost_partition = json_string(c, "partition");
    k2.balance = balance;
    by_plan.push_back(json_number(measure_in_child(k2), "median_s"));
  }
  const double t1 = median_of(one), tc = median_of(by_cost), tp = median_of(by_plan);
  std::printf(
      "\n# W3 cuts at K = 2, M = 8, remat never (%d rounds; efficiency = t(K=1) / (2 t(K=2)))\n",
      o.rounds);
  std::printf("%-34s %-26s %9s %10s\n", "cut", "layers", "step ms", "efficiency");
  std::printf("%-34s %-26s %9.1f %10s\n", "K = 1", "all", t1 * 1e3, "-");
  std::printf("%-34s %-26s %9.1f %10.3f\n", "cost-balanced (forward FLOPs)", cost_partition.c_str(),
              tc * 1e3, t1 / (2 * tc));
  std::printf("%-34s %-26s %9.1f %10.3f  (predicted step %.1f ms)\n",
              "planner (simulated step time)", balance.c_str(), tp * 1e3, t1 / (2 * tp),
              planned.step_seconds * 1e3);
}

}  // namespace

int run_plan_validate(const PlanValidateOptions& o) {
  std::vector<Config> configs;
  for (int k : o.K)
    for (const std::string& sched : o.schedules) {
      if (k == 1 && sched != "gpipe") continue;  // one stage: every schedule is GPipe's order
      const bool all_remat = o.every_remat || sched == "gpipe" || sched == "1f1b";
      for (int m : o.M) {
        if (sched == "interleaved" && m % k != 0) continue;
        for (const std::string& r : o.remat) {
          if (!all_remat && r != o.remat.front()) continue;
          if (r == "except_last" && m == 1) continue;  // the same program as never
          configs.push_back({k, m, r, sched});
        }
      }
    }
  // The costs, profiled in this process on one thread (a stage's), before any run.
  MeasureOptions base;
  base.layers = o.layers;
  base.batch = o.batch;
  base.threads = 1;
  set_default_intra_op_threads(1);
  MeasuredWorkload w = measure_workload(base), other = measure_workload(base);
  train::TrainConfig tc;
  tc.optimizer = "adam";  // what measure trains with
  tc.lr = 1e-4;
  std::vector<int> ms = o.M;
  const ModelCosts costs = train::training_costs(tc, w.model, w.batch, ms, &other.model, 1);
  std::printf("# W3's model (Transformer %ld+%ld, N = %ld), one thread per stage; %zu runs\n",
              static_cast<long>(o.layers), static_cast<long>(o.layers), static_cast<long>(o.batch),
              configs.size());
  std::printf("# costs: %s; optimizer step %.1f ms (1 thread); link %.1f us + %.2f GB/s\n",
              costs.describe.c_str(), costs.optimizer_seconds * 1e3,
              costs.link_latency_seconds * 1e6, costs.link_bytes_per_second / 1e9);
  std::printf("%2s %-13s %3s %-12s %9s %9s %7s  %-23s %7s  %-23s %7s\n", "K", "schedule", "M",
              "remat", "step ms", "pred ms", "err", "act peak MB (meas/pred)", "err",
              "total peak MB (meas/pr)", "err");
  double worst_time = 0, worst_act = 0, worst_total = 0;
  int time_ok = 0, act_ok = 0, total_ok = 0;
  for (const Config& c : configs) {
    MeasureOptions mo = base;
    mo.K = c.k;
    mo.M = c.m;
    mo.remat = c.remat;
    mo.schedule = c.schedule;
    mo.virtual_stages = c.schedule == "interleaved" || c.schedule == "zb-v" ? 2 : 1;
    mo.warmup = o.warmup;
    mo.steps = o.steps;
    mo.max_seconds = o.max_seconds;
    const std::string ours = measure_in_child(mo);
    PlanChoice ch;
    ch.schedule = parse_schedule(c.schedule);
    ch.K = c.k;
    ch.M = c.m;
    ch.virtual_stages = mo.virtual_stages;
    ch.bounds = bounds_of(json_string(ours, "partition"));
    ch.remat.assign(ch.cells(), parse_remat(c.remat));
    const PlanEstimate e = estimate_plan(costs, ch, o.batch);
    const double measured = json_number(ours, "median_s");
    const std::vector<double> act = per_device(json_string(ours, "act_peak_devices")),
                              total = per_device(json_string(ours, "total_peak_devices"));
    GPIPE_CHECK(act.size() == e.memory.size() && total.size() == e.memory.size(),
                "validate: the run reports ", act.size(), " devices, the plan ", e.memory.size());
    const double et = error_of(e.step_seconds, measured);
    double ea = 0, etot = 0;
    std::string act_s, total_s;
    for (size_t d = 0; d < act.size(); ++d) {
      const double pa = e.memory[d].activations, pt = e.memory[d].total();
      if (std::abs(error_of(pa, act[d])) > std::abs(ea)) ea = error_of(pa, act[d]);
      if (std::abs(error_of(pt, total[d])) > std::abs(etot)) etot = error_of(pt, total[d]);
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s%.1f/%.1f", d ? " " : "", act[d] / 1e6, pa / 1e6);
      act_s += buf;
      std::snprintf(buf, sizeof buf, "%s%.0f/%.0f", d ? " " : "", total[d] / 1e6, pt / 1e6);
      total_s += buf;
    }
    worst_time = std::max(worst_time, std::abs(et));
    worst_act = std::max(worst_act, std::abs(ea));
    worst_total = std::max(worst_total, std::abs(etot));
    time_ok += std::abs(et) <= 0.10;
    act_ok += std::abs(ea) <= 0.10;
    total_ok += std::abs(etot) <= 0.10;
    std::printf("%2d %-13s %3d %-12s %9.1f %9.1f %+6.1f%%  %-23s %+6.1f%%  %-23s %+6.1f%%\n", c.k,
                c.schedule.c_str(), c.m, c.remat.c_str(), measured * 1e3, e.step_seconds * 1e3,
                100 * et, act_s.c_str(), 100 * ea, total_s.c_str(), 100 * etot);
    std::fflush(stdout);
  }
  const int n = static_cast<int>(configs.size());
  std::printf(
      "# within +-10%%: step time %d/%d (worst %.1f%%), activation peak %d/%d (worst %.1f%%), "
      "total peak %d/%d (worst %.1f%%); err = predicted / measured - 1, the worst device's\n",
      time_ok, n, 100 * worst_time, act_ok, n, 100 * worst_act, total_ok, n, 100 * worst_total);
  std::printf("# measured: median of %d steps after %d warm-up, one process per run\n", o.steps,
              o.warmup);
  if (o.compare_cuts) compare_cuts(o, base, costs);
  return 0;
}

}  // namespace gpipe::bench
