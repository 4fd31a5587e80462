// gpipe_bench: reproduces the workloads of shared/BENCHMARKS.md, each beside
// its reference in the same run.
//   bazel run //tools:gpipe_bench -- gemm [--sizes 512,1024] [--threads 1,2]
#include <CLI/CLI.hpp>
#include <cstdio>

#include "core/error.h"
#include "tools/bench_common.h"
#include "tools/benchmarks.h"

int main(int argc, char** argv) {
  const std::string env_note = gpipe::bench::ensure_fair_openblas_env(argc, argv);
  CLI::App app{"gpipe_bench: gpipe beside its reference, one workload at a time"};
  app.require_subcommand(1);

  gpipe::bench::GemmBenchOptions gemm;
  gemm.env_note = env_note;
  CLI::App* g = app.add_subcommand("gemm", "W1: fp32 square GEMM vs numpy/OpenBLAS");
  g->add_option("--sizes", gemm.sizes, "matrix sizes n")->delimiter(',')->check(CLI::PositiveNumber);
  g->add_option("--threads", gemm.threads, "intra-op thread counts")->delimiter(',')->check(CLI::PositiveNumber);
  g->add_option("--min-seconds", gemm.min_seconds, "timing budget per measurement")->check(CLI::PositiveNumber);
  g->add_option("--python", gemm.python, "python with numpy for the reference");
  g->add_flag("--no-numpy", gemm.skip_numpy, "skip the numpy reference");

  CLI11_PARSE(app, argc, argv);
  try {
    if (g->parsed()) return gpipe::bench::run_gemm(gemm);
  } catch (const gpipe::Error& e) {
    std::fprintf(stderr, "gpipe_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
