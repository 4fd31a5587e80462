// gpipe_bench pipeline: W3 of shared/BENCHMARKS.md. The 8+8-layer
// Transformer (16,843,776 parameters), N = 64, Adam: samples/s with K = 1 on
// one core (threads_per_stage = 1) and K = 2 with one core per stage, for each
// M and remat mode. Pipeline efficiency = (K=2 / K=1) / (2M / (M + 1)), the
// balanced ideal speedup of two stages over M micro-batches (GPipe's bubble).
// The reference is PyTorch's hand-rolled `seq` baseline (gradient
// accumulation over M micro-batches) at 1 and 2 threads, and
// torch.distributed.pipeline.sync.Pipe where the installed torch still has it
// (it was removed in PyTorch 2.4). Every measurement is a fresh process.
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "pipeline/simulate.h"
#include "tools/bench/benchmarks.h"
#include "tools/bench/common.h"

namespace gpipe::bench {
namespace {

std::string seq_args(const std::string& mode, int threads, int m, const PipelineBenchOptions& opt) {
  return mode + " --threads " + std::to_string(threads) +
         " --layers 8 --batch 64 --micro-batches " + std::to_string(m) + " --warmup " +
         std::to_string(opt.warmup) + " --steps " + std::to_string(opt.steps);
}

// K=2 samples/s the simulator predicts from the measured K=1 rate: the K=1
// program on unit costs calibrates seconds per unit; each K=2 cell gets its
// share of the partitioner's cost.
double predicted_k2(const std::string& schedule, const std::string& remat, int m, double k1_sps,
                    const std::vector<double>& cell_costs) {
  if (cell_costs.size() != 2 || k1_sps <= 0) return 0;
  const ScheduleKind kind = parse_schedule(schedule);
  const RematMode mode = parse_remat(remat);
  CostModel one = CostModel::uniform(1, 1.0, 2.0);
  const double unit_seconds =
      (64 / k1_sps) / simulate(make_schedule(kind, 1, m, mode), one).step_seconds;
  const double total = cell_costs[0] + cell_costs[1];
  CostModel two;
  for (double c : cell_costs) {
    StageCosts s;
    s.forward = c / total;
    s.backward = 2 * c / total;
    two.stages.push_back(s);
  }
  return 64 / (simulate(make_schedule(kind, 2, m, mode), two).step_seconds * unit_seconds);
}

using SamplesPerSecond =
    std::map<std::tuple<std::string, int, int>, double>;  // (schedule/remat, M, K) -> samples/s

// gpipe's K = 1 vs K = 2 table; returns every figure and the K = 2 partition.
SamplesPerSecond gpipe_sweep(const PipelineBenchOptions& opt, double gflop,
                             std::string* partition) {
  SamplesPerSecond ours;
  std::printf("%-18s %3s %12s %12s %8s %7s %10s %12s %9s %10s %6s\n", "schedule/remat", "M",
              "K=1 smp/s", "K=2 smp/s", "speedup", "ideal", "efficiency", "K=2 GF/s", "bubble",
              "predicted", "error");
  for (const std::string& schedule : opt.schedules)
    for (const std::string& remat : opt.remat)
      for (int m : opt.M) {
        const std::string row = schedule + "/" + remat;
        double sps[3] = {0, 0, 0};
        std::vector<double> cell_costs;
        for (int k : {1, 2}) {
          MeasureOptions mo = w3_measure(k, m, schedule, remat, 1, opt.warmup, opt.steps);
          if (k == 2) mo.balance = opt.balance;
          const std::string j = measure_in_child(mo);
          sps[k] = 64 / json_number(j, "median_s");
          if (k == 2) *partition = json_string(j, "partition");
          if (k == 2) {
            std::istringstream costs(json_string(j, "cell_costs"));
            for (double c; costs >> c;) cell_costs.push_back(c);
          }
          ours[{row, m, k}] = sps[k];
        }
        const double speedup = sps[2] / sps[1], ideal = 2.0 * m / (m + 1);
        const double predicted = predicted_k2(schedule, remat, m, sps[1], cell_costs);
        std::printf("%-18s %3d %12.2f %12.2f %8.2f %7.2f %10.3f %12.1f %9.3f %10.2f %5.1f%%\n",
                    row.c_str(), m, sps[1], sps[2], speedup, ideal, speedup / ideal,
                    gflop * sps[2] / 64, 1.0 / (m + 1), predicted,
                    100.0 * (predicted / sps[2] - 1.0));
        std::fflush(stdout);
      }
  std::printf(
      "# K=2 partition (layers per cell): %s; efficiency = speedup / ideal, ideal = 2M/(M+1); goal "
      ">= 0.95\n",
      partition->c_str());
  std::printf("#   (bubble = GPipe's ideal idle share (K-1)/(M+K-1) at K=2)\n");
  std::printf(
      "# predicted = the simulator (pipeline/simulate.h) running the K=2 program with each cell's\n"
      "#   share of the FLOP cost, F : B : R = 1 : 2 : 1, free links, scaled so that the same "
      "model\n"
      "#   reproduces the measured K=1 step; error = predicted / measured K=2 - 1\n");
  return ours;
}

// True when the installed torch still has Pipe; prints why not otherwise.
bool torch_has_pipe(const PipelineBenchOptions& opt, const std::string& python) {
  const std::string j = try_run_json(python_command(
      python, "transformer_torch.py", 2, seq_args("pipe", 2, 8, opt) + " --partitions 2"));
  if (!j.empty() && json_has(j, "error"))
    std::printf("# PyTorch Pipe not measured: %s; the hand-rolled seq baseline stands in\n",
                json_string(j, "error").c_str());
  return !j.empty() && !json_has(j, "error");
}

// PyTorch's seq baseline at each thread count; returns the torch version.
std::string torch_seq_table(const PipelineBenchOptions& opt, const std::string& python,
                            const SamplesPerSecond& ours) {
  std::string version;
  std::printf(
      "# PyTorch seq baseline (M=1 plain training, M>1 gradient accumulation), samples/s\n");
  std::printf("%3s", "M");
  for (int t : opt.torch_threads) std::printf(" %11s%d", "threads=", t);
  std::printf("   gpipe K=2 (best remat) / torch seq at 2 threads\n");
  for (int m : opt.M) {
    std::printf("%3d", m);
    double two = 0;
    for (int t : opt.torch_threads) {
      const std::string j = try_run_json(
          python_command(python, "transformer_torch.py", t, seq_args("seq", t, m, opt)));
      const double s = j.empty() ? 0 : 64 / json_number(j, "median_s");
      if (!j.empty()) version = json_string(j, "torch");
      if (t == 2) two = s;
      std::printf(" %12.2f", s);
    }
    double best = 0;
    for (const std::string& s : opt.schedules)
      for (const std::string& r : opt.remat) best = std::max(best, ours.at({s + "/" + r, m, 2}));
    if (two > 0)
      std::printf("   %.2f\n", best / two);
    else
      std::printf("   -\n");
    std::fflush(stdout);
  }
  return version;
}

void torch_pipe_table(const PipelineBenchOptions& opt, const std::string& python) {
  std::printf("# PyTorch Pipe (2 threads), samples/s\n%3s %12s %14s %14s\n", "M", "checkpoint",
              "K=1", "K=2");
  for (const std::string& ck : {std::string("never"), std::string("except_last")})
    for (int m : opt.M) {
      double s[3] = {0, 0, 0};
      for (int k : {1, 2}) {
        const std::string j =
            try_run_json(python_command(python, "transformer_torch.py", 2,
                                        seq_args("pipe", 2, m, opt) + " --partitions " +
                                            std::to_string(k) + " --checkpoint " + ck));
        s[k] = j.empty() || json_has(j, "error") ? 0 : 64 / json_number(j, "median_s");
      }
      std::printf("%3d %12s %14.2f %14.2f\n", m, ck.c_str(), s[1], s[2]);
    }
}

}  // namespace

int run_pipeline(const PipelineBenchOptions& opt) {
  const std::string python = opt.torch.python.empty() ? default_torch_python() : opt.torch.python;
  const double gflop = transformer_step_flops(8, 64, 32, 32, 256, 1024, 8192) / 1e9;
  std::printf(
      "# W3 pipeline scaling: 8+8 layers, N=64, Adam(lr=1e-4), %.1f GFLOP/step; median of %d steps "
      "after %d "
      "warm-up;\n# K=1: one stage, 1 thread; K=2: two stages, 1 thread each; %s\n",
      gflop, opt.steps, opt.warmup, opt.torch.env_note.c_str());
  std::string partition;
  const SamplesPerSecond ours = gpipe_sweep(opt, gflop, &partition);
  if (opt.torch.skip) return 0;
  const bool pipe_ok = opt.try_pipe && torch_has_pipe(opt, python);
  const std::string version = torch_seq_table(opt, python, ours);
  if (pipe_ok) torch_pipe_table(opt, python);
  if (!version.empty())
    std::printf("# reference: torch %s (%s)\n", version.c_str(), python.c_str());
  return 0;
}

}  // namespace gpipe::bench
