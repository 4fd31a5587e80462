// gpipe_bench processes: the multi-process runtime against the in-process
// one, in one command (every measurement a fresh process, the variants
// alternated `rounds` times, medians reported, ratios taken within a round).
//
//  * W3 (8+8 Transformer, N = 64) with K = 2: two MPI ranks, one stage and
//    one core each (mpirun binds each rank to a core), against the in-process
//    K = 2 run (two stage threads, one intra-op thread each), and K = 1 on one
//    core as the base of the pipeline efficiency. The MPI transport's
//    overhead per step is the difference of the two K = 2 step times.
//  * Data parallelism: R = 2 replicas of K = 1 (two ranks, N / 2 each)
//    against one process training all N on one core (ideal speedup 2).
//  * Bytes sent per step across the K - 1 boundaries (header included),
//    against the paper's model: the boundary activations of all N examples
//    forward plus their gradients backward.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tools/bench/benchmarks.h"
#include "tools/bench/common.h"

namespace gpipe::bench {
namespace {

// mpirun as root, oversubscription allowed, on this host only, over shared
// memory (btl self,vader: without it OpenMPI also polls its TCP transport,
// which cost the ranks 5-15% of their compute here).
std::string mpirun(const ProcessesBenchOptions& opt, int np) {
  return "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
         "OMPI_MCA_rmaps_base_oversubscribe=1 "
         "OMPI_MCA_plm=isolated PMIX_MCA_gds=hash OMPI_MCA_btl=self,vader " +
         opt.mpirun + " -np " + std::to_string(np) + " ";
}

std::string measure_args(const MeasureOptions& o) {
  return " measure --workload transformer --layers 8 --batch 64 --threads 1 --K " +
         std::to_string(o.K) + " --M " + std::to_string(o.M) + " --remat " + o.remat +
         " --warmup " + std::to_string(o.warmup) + " --steps " + std::to_string(o.steps) +
         " --max-seconds 1000000 --replicas " + std::to_string(o.replicas) + " < /dev/null";
}

struct Row {
  std::vector<double> k1, inproc, mpi, ratio, overhead;
  double bytes_inproc = 0, bytes_mpi = 0, predicted = 0;
};

}  // namespace

int run_processes(const ProcessesBenchOptions& opt) {
  std::printf(
      "# W3 (8+8 Transformer, N=64, remat %s): K=2 as two MPI ranks vs two threads of one "
      "process\n",
      opt.remat.c_str());
  std::printf("%3s %11s %13s %11s %9s %12s %10s %12s %12s %12s\n", "M", "K=1 smp/s", "K=2 in-proc",
              "K=2 MPI", "MPI/in", "overhead ms", "MPI effic", "bytes/step", "in-process",
              "predicted");
  for (int m : opt.M) {
    Row row;
    MeasureOptions mo;
    mo.K = 2;
    mo.M = m;
    mo.remat = opt.remat;
    mo.warmup = opt.warmup;
    mo.steps = opt.steps;
    for (int round = 0; round < opt.rounds; ++round) {
      MeasureOptions one = mo;
      one.K = 1;
      const std::string base = run_json(self_exe() + measure_args(one));
      const std::string in = run_json(self_exe() + measure_args(mo));
      const std::string mp = run_json(mpirun(opt, 2) + self_exe() + measure_args(mo));
      row.k1.push_back(json_number(base, "median_s"));
      row.inproc.push_back(json_number(in, "median_s"));
      row.mpi.push_back(json_number(mp, "median_s"));
      row.ratio.push_back(row.inproc.back() / row.mpi.back());
      row.overhead.push_back(row.mpi.back() - row.inproc.back());
      row.bytes_inproc = json_number(in, "bytes_per_step");
      row.bytes_mpi = json_number(mp, "bytes_per_step");
      row.predicted = json_number(mp, "predicted_bytes_per_step");
    }
    const double k1 = median_of(row.k1), in = median_of(row.inproc), mp = median_of(row.mpi);
    const double ideal = 2.0 * m / (m + 1);
    std::printf("%3d %11.2f %13.2f %11.2f %9.3f %12.1f %10.3f %12.0f %12.0f %12.0f\n", m, 64 / k1,
                64 / in, 64 / mp, median_of(row.ratio), 1e3 * median_of(row.overhead),
                (k1 / mp) / ideal, row.bytes_mpi, row.bytes_inproc, row.predicted);
    std::fflush(stdout);
  }
  std::printf(
      "# MPI/in = in-process step time / MPI step time, overhead = their difference (same round, "
      "median of\n"
      "#   rounds); MPI effic = (K=1 / K=2 MPI) / (2M/(M+1))\n");
  std::printf(
      "# bytes/step: all boundaries, forward + backward, headers included; predicted = activations "
      "of N\n"
      "#   examples at each boundary forward + gradients of the floating ones backward\n");

  std::printf(
      "# Data parallel: R=2 replicas of K=1 (two ranks, N/2 each) vs one process, N=64, M=1 per "
      "replica\n");
  std::printf("%14s %14s %9s %8s\n", "1 proc smp/s", "R=2 smp/s", "speedup", "ideal");
  MeasureOptions dp;
  dp.K = 1;
  dp.M = 1;
  dp.remat = "never";
  dp.warmup = opt.warmup;
  dp.steps = opt.steps;
  std::vector<double> one, two, speedup;
  for (int round = 0; round < opt.rounds; ++round) {
    MeasureOptions r2 = dp;
    r2.replicas = 2;
    one.push_back(json_number(run_json(self_exe() + measure_args(dp)), "median_s"));
    two.push_back(
        json_number(run_json(mpirun(opt, 2) + self_exe() + measure_args(r2)), "median_s"));
    speedup.push_back(one.back() / two.back());
  }
  std::printf("%14.2f %14.2f %9.3f %8.2f\n", 64 / median_of(one), 64 / median_of(two),
              median_of(speedup), 2.0);
  return 0;
}

}  // namespace gpipe::bench
