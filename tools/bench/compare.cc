// compare_steps (benchmarks.h): W2's and W5's tables, gpipe's training step
// beside PyTorch's, each side in a fresh process.
//
// Note [Rounds against noise]. On a shared two-core machine one run of
// either side can land in a slow phase of the host (the FMA peak itself
// moved by 8% within an hour on the Zen 4 machine), and a ratio taken from
// two runs minutes apart then measures the host. So each thread count can be
// measured in rounds: every round measures the FMA peak at that thread count
// and the active level (in this parent process, while no child runs), then
// both sides, the order alternating from round to round, and prints its own
// row: the ratio of two neighbouring runs and gpipe's share of a peak taken
// just before them. The summary line counts the rounds that meet each goal,
// which is how BENCHMARKS.md's goals are stated ("three runs out of three").
#include <algorithm>
#include <cstdio>

#include "core/cpu_isa.h"
#include "core/error.h"
#include "tools/bench/benchmarks.h"
#include "tools/bench/common.h"

namespace gpipe::bench {
namespace {

constexpr double kRatioGoal = 1.3;  // gpipe's step at least 1.3x PyTorch's
constexpr double kPeakGoal = 0.8;   // W2's step at 80% of the measured FMA peak
constexpr double kPeakSeconds = 1;  // measure_fma_peak's budget per round

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

// One round's figures.
struct Round {
  double gpipe_s = 0, torch_s = 0;  // median step times (torch 0: not run)
  double peak = 0;                  // GFLOP/s
  double gpipe_loss = 0, torch_loss = 0;
};

// "min a, median b, max c, >= goal in k of n" for `values` (n > 1).
std::string spread(std::vector<double> v, double goal, const char* format) {
  const double lo = *std::min_element(v.begin(), v.end());
  const double hi = *std::max_element(v.begin(), v.end());
  const auto fmt = [&](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, format, x);
    return std::string(buf);
  };
  const auto meeting = std::count_if(v.begin(), v.end(), [&](double x) { return x >= goal; });
  return detail::concat("min ", fmt(lo), ", median ", fmt(median_of(v)), ", max ", fmt(hi),
                        "; >= ", fmt(goal), " in ", meeting, " of ", v.size());
}

}  // namespace

int compare_steps(const StepComparison& c, const TorchSide& torch, const StepRuns& runs,
                  double gflop) {
  GPIPE_CHECK(runs.rounds >= 1, c.name, ": --rounds must be at least 1, got ", runs.rounds);
  const std::string python = torch.python.empty() ? default_torch_python() : torch.python;
  const std::string gpipe_col = detail::concat("gpipe ", c.unit, "/s"),
                    torch_col = detail::concat("torch ", c.unit, "/s");
  const CpuIsa isa = cpu_isa();
  std::printf(
      "# each round: the %s FMA peak at the row's thread count (%%peak = gpipe GF/s against it), "
      "then both sides, the order alternating (Note [Rounds against noise])\n",
      cpu_isa_name(isa));
  std::printf("%7s %5s %12s %12s %7s %10s %6s %10s %10s %10s\n", "threads", "round",
              gpipe_col.c_str(), torch_col.c_str(), "ratio", "gpipe GF/s", "%peak", "torch GF/s",
              "gpipe loss", "torch loss");
  const std::string params = with_commas(c.expected_params);
  std::string torch_version;
  const double u = c.units_per_step;
  for (int threads : runs.threads) {
    std::vector<double> ratios, shares;
    for (int r = 0; r < runs.rounds; ++r) {
      Round got;
      got.peak = measure_fma_peak(isa, threads, kPeakSeconds);
      const auto run_torch = [&] {
        if (torch.skip) return;
        std::string args = c.script_args.empty() ? "" : c.script_args + " ";
        args += "--threads " + std::to_string(threads) + " --warmup " +
                std::to_string(runs.warmup) + " --steps " + std::to_string(runs.steps) +
                " --max-seconds " + std::to_string(runs.max_seconds) + c.script_extra;
        const std::string ref = try_run_json(python_command(python, c.script, threads, args));
        if (ref.empty()) return;
        torch_version = json_string(ref, "torch");
        GPIPE_CHECK(json_number(ref, "params") == c.expected_params, "PyTorch's ", c.name,
                    " model has ", json_number(ref, "params"), " parameters, expected ", params);
        got.torch_s = json_number(ref, "median_s");
        got.torch_loss = json_number(ref, "loss_first");
      };
      const auto run_gpipe = [&] {
        MeasureOptions m = c.model;
        m.threads = threads;
        m.warmup = runs.warmup;
        m.steps = runs.steps;
        m.max_seconds = runs.max_seconds;
        const std::string ours = measure_in_child(m);
        GPIPE_CHECK(json_number(ours, "params") == c.expected_params, c.name, " model has ",
                    json_number(ours, "params"), " parameters, expected ", params);
        got.gpipe_s = json_number(ours, "median_s");
        got.gpipe_loss = json_number(ours, "loss_first");
      };
      if (r % 2 == 0) {
        run_torch();
        run_gpipe();
      } else {
        run_gpipe();
        run_torch();
      }
      const double ratio = got.torch_s > 0 ? got.torch_s / got.gpipe_s : 0.0;
      const double share = gflop / got.gpipe_s / got.peak;
      if (got.torch_s > 0) ratios.push_back(ratio);
      shares.push_back(share);
      std::printf("%7d %5d %12.0f %12.0f %7.2f ", threads, r + 1, u / got.gpipe_s,
                  got.torch_s > 0 ? u / got.torch_s : 0.0, ratio);
      std::printf(c.gflop_format, gflop / got.gpipe_s);
      std::printf(" %5.1f%% ", 100 * share);
      std::printf(c.gflop_format, got.torch_s > 0 ? gflop / got.torch_s : 0.0);
      std::printf(" %10.3f %10.3f\n", got.gpipe_loss, got.torch_loss);
      std::fflush(stdout);
    }
    if (runs.rounds > 1) {
      if (ratios.size() > 1)
        std::printf("# %d thread(s), ratio: %s\n", threads,
                    spread(ratios, kRatioGoal, "%.3f").c_str());
      for (double& s : shares) s *= 100;
      std::printf("# %d thread(s), %% of the FMA peak: %s\n", threads,
                  spread(shares, 100 * kPeakGoal, "%.1f").c_str());
    }
  }
  std::printf(
      "# parameters: %s on both sides (checked); ratio = torch step time / gpipe step time; goal "
      ">= %.1f; %%peak: gpipe's GFLOP/s against the float32 FMA peak measured just before (goal "
      ">= %.0f%% for W2)\n",
      params.c_str(), kRatioGoal, 100 * kPeakGoal);
  if (!torch_version.empty())
    std::printf("# reference: torch %s (%s)\n", torch_version.c_str(), python.c_str());
  return 0;
}

}  // namespace gpipe::bench
