// gpipe_bench remat: W4 of shared/BENCHMARKS.md. Activation memory and step
// time of the 8+8-layer Transformer (N = 64, Adam) with and without
// rematerialisation, for each K (K = 1: one stage with 2 threads; K = 2: one
// thread per stage), M and schedule (GPipe, and 1F1B at K = 2). gpipe's figure is the allocator's
// peak of activation bytes on the busiest device during the timed steps (peaks reset after the
// warm-up, so parameters, gradients and Adam state are not in it).
//
// The bound O(N + (L/K)(N/M)) is checked with a least-squares fit
// peak = a + b * u over all rows, where u counts layer-examples of
// activations alive at once on one device: (L/K) N without remat under GPipe
// (every micro-batch's graph is kept until its backward), (L/K)(N/M) min(M, K)
// without remat under 1F1B (the first cell holds at most K micro-batches'
// graphs), (L/K)(N/M) with `always` and with `except_last` when M > 1 (one
// micro-batch's graph at a time: the last micro-batch's graph is freed by its
// own backward before the next one is rebuilt). Micro-batch inputs kept at
// cell boundaries are the O(N) term, inside a.
//
// Note [Remat cost]. Recomputing a whole cell adds one forward (about a third
// of a micro-batch's work) per rematerialised micro-batch. Under GPipe every
// cell recomputes M - 1 micro-batches with `except_last`, so on two devices
// that are both busy the step grows by about (M-1) F / ((M+1)(F+B)), 26% at
// M = 8 with B = 2F, whatever the cut. Under 1F1B the last cell runs each
// backward right after its forward, so `except_last` recomputes nothing
// there and only the first cell pays: the cost is what the first cell's
// recomputation adds to the busier device. The 1F1B rows show that.
//
// PyTorch's side is BENCHMARKS.md's: K = 1, the hand-rolled seq schedule
// (gradient accumulation), per-layer torch.utils.checkpoint, 2 threads;
// activation memory = peak maxRSS - maxRSS after gradients + Adam state.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "tools/bench/benchmarks.h"
#include "tools/bench/common.h"

namespace gpipe::bench {
namespace {

constexpr double kMB = 1e6;

double live_units(const std::string& schedule, const std::string& remat, int k, int m) {
  const double per_cell = 16.0 / k, n = 64;
  if (remat == "never" || (m == 1 && remat == "except_last"))
    return schedule == "1f1b" ? per_cell * (n / m) * std::min(m, k) : per_cell * n;
  return per_cell * n / m;  // always; except_last with M > 1
}

struct Row {
  std::string schedule;
  int k, m;
  std::string remat;
  double step_s, act, units;
  std::string devices;
};

std::vector<Row> gpipe_rows(const RematBenchOptions& opt) {
  std::vector<Row> rows;
  for (const std::string& schedule : opt.schedules)
    for (int k : opt.K)
      for (int m : opt.M)
        for (const std::string& remat : opt.remat) {
          if (remat == "except_last" && m == 1) continue;  // the same run as never
          // 1F1B at K = 1 or M = 1 is GPipe's program or plain accumulation,
          // which holds one micro-batch's graph anyway.
          if (schedule == "1f1b" && (k == 1 || m == 1)) continue;
          const std::string j = measure_in_child(
              w3_measure(k, m, schedule, remat, 2 / k > 0 ? 2 / k : 1, opt.warmup, opt.steps));
          rows.push_back({schedule, k, m, remat, json_number(j, "median_s"),
                          json_number(j, "act_peak_max"), live_units(schedule, remat, k, m),
                          json_string(j, "act_peak_devices")});
        }
  return rows;
}

// Prints the rows with their remat cost and the least-squares fit act = a + b * units.
void print_gpipe_rows(const std::vector<Row>& rows) {
  double su = 0, sa = 0, suu = 0, sua = 0;
  std::map<std::tuple<std::string, int, int>, double> never_s;
  for (const Row& r : rows) {
    su += r.units;
    sa += r.act;
    suu += r.units * r.units;
    sua += r.units * r.act;
    if (r.remat == "never") never_s[{r.schedule, r.k, r.m}] = r.step_s;
  }
  const double n = static_cast<double>(rows.size());
  const double den = n * suu - su * su;
  const double b = den != 0 ? (n * sua - su * sa) / den : 0, a = (sa - b * su) / n;
  std::printf("%-9s %2s %3s %-12s %9s %10s %9s %8s %10s %7s   %s\n", "schedule", "K", "M", "remat",
              "step s", "act MB", "remat +%", "u", "fit MB", "fit err",
              "peak activation bytes per device");
  for (const Row& r : rows) {
    const auto it = never_s.find({r.schedule, r.k, r.m});
    const double cost =
        it != never_s.end() && r.remat != "never" ? 100 * (r.step_s / it->second - 1) : 0;
    const double fit = a + b * r.units;
    std::printf("%-9s %2d %3d %-12s %9.3f %10.1f %8.1f%% %8.0f %10.1f %6.1f%%   %s\n",
                r.schedule.c_str(), r.k, r.m, r.remat.c_str(), r.step_s, r.act / kMB, cost, r.units,
                fit / kMB, 100 * (r.act - fit) / r.act, r.devices.c_str());
  }
  std::printf(
      "# fit: act = %.1f MB + %.3f MB x u, u = layer-examples alive on one device ((L/K)N never, "
      "(L/K)(N/M) "
      "always and except_last with M>1, (L/K)(N/M)min(M,K) 1f1b never; L=16, N=64)\n",
      a / kMB, b / kMB);
  std::printf(
      "# remat +%% = step time vs never at the same schedule, K and M; goal <= 20%%. Whole-cell "
      "remat adds a forward per recomputed micro-batch: under GPipe about (M-1)F/((M+1)(F+B)) "
      "on busy devices; 1F1B's last cell recomputes nothing with except_last (Note [Remat "
      "cost])\n");
  std::fflush(stdout);
}

// PyTorch's side (K = 1, seq schedule, 2 threads); returns the torch version.
std::string torch_rows(const RematBenchOptions& opt, const std::string& python) {
  std::printf(
      "# PyTorch (K=1, seq schedule, 2 threads): activation = peak maxRSS - maxRSS after "
      "grads+Adam state\n");
  std::printf("%3s %-6s %9s %10s %9s %12s %12s\n", "M", "remat", "step s", "act MB", "remat +%",
              "after st. MB", "peak RSS MB");
  std::string version;
  for (int m : opt.M) {
    double none_s = 0;
    for (const std::string& remat : {std::string("none"), std::string("layer")}) {
      const std::string j = try_run_json(
          python_command(python, "transformer_torch.py", 2,
                         "memory --threads 2 --layers 8 --batch 64 --micro-batches " +
                             std::to_string(m) + " --remat " + remat + " --warmup " +
                             std::to_string(opt.warmup) + " --steps " + std::to_string(opt.steps)));
      if (j.empty()) continue;
      version = json_string(j, "torch");
      const double s = json_number(j, "median_s");
      if (remat == "none") none_s = s;
      std::printf("%3d %-6s %9.3f %10.1f %8.1f%% %12.1f %12.1f\n", m, remat.c_str(), s,
                  json_number(j, "activation_bytes") / kMB,
                  remat == "layer" && none_s > 0 ? 100 * (s / none_s - 1) : 0.0,
                  json_number(j, "rss_after_state") / kMB, json_number(j, "peak_rss") / kMB);
      std::fflush(stdout);
    }
  }
  return version;
}

}  // namespace

int run_remat(const RematBenchOptions& opt) {
  const std::string python = opt.torch.python.empty() ? default_torch_python() : opt.torch.python;
  std::printf(
      "# W4 activation memory: 8+8 layers, N=64, Adam(lr=1e-4), 2 cores (K=1: 2 threads; K=2: 1 "
      "thread per "
      "stage);\n# %d warm-up + %d timed steps (median); %s\n",
      opt.warmup, opt.steps, opt.torch.env_note.c_str());
  print_gpipe_rows(gpipe_rows(opt));
  if (opt.torch.skip) return 0;
  const std::string version = torch_rows(opt, python);
  if (!version.empty())
    std::printf("# reference: torch %s (%s)\n", version.c_str(), python.c_str());
  return 0;
}

}  // namespace gpipe::bench
