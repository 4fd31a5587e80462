// gpipe_bench gemm: W1 of shared/BENCHMARKS.md. fp32 C = A @ B for square
// n x n through ops::matmul with each GEMM backend, and numpy (OpenBLAS) in
// the same run, at each thread count. Reports best-time GFLOP/s and ratios.
#include <cstdio>
#include <map>

#include "core/parallel.h"
#include "ops/cpu/blas.h"
#include "ops/linalg.h"
#include "tools/bench_common.h"
#include "tools/benchmarks.h"

namespace gpipe::bench {

int run_gemm(const GemmBenchOptions& opt) {
  std::printf("# W1 gemm, fp32, best of >= 5 repeats and %.1f s; %s\n", opt.min_seconds, opt.env_note.c_str());
  std::printf("%6s %7s %14s %14s %14s %9s %9s\n", "n", "threads", "gpipe-blas", "gpipe-eigen", "numpy",
              "blas/np", "eigen/np");
  std::string sizes;
  for (int64_t n : opt.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(n);
  for (int threads : opt.threads) {
    ThreadPool pool(threads);
    IntraOpScope scope(&pool);
    std::map<int64_t, double> np;
    if (!opt.skip_numpy) {
      const std::string cmd = "OPENBLAS_NUM_THREADS=" + std::to_string(threads) + " OMP_NUM_THREADS=" +
                              std::to_string(threads) + " " + opt.python + " " +
                              data_path("benchmarks/gemm_numpy.py") + " " + sizes + " " +
                              std::to_string(opt.min_seconds);
      for (const std::string& line : run_lines(cmd)) {
        GPIPE_CHECK(json_bool(line, "check"), "numpy result failed its Freivalds check: ", line);
        np[static_cast<int64_t>(json_number(line, "n"))] = json_number(line, "gflops");
      }
    }
    for (int64_t n : opt.sizes) {
      Tensor a = Tensor::randn(Shape{n, n}, 1), b = Tensor::randn(Shape{n, n}, 2);
      Tensor c = Tensor::empty(Shape{n, n});
      double gf[2];
      int i = 0;
      for (auto backend : {ops::cpu::GemmBackend::kBlas, ops::cpu::GemmBackend::kEigen}) {
        ops::cpu::set_gemm_backend(backend);
        const Timing t = time_it([&] { c = ops::matmul(a, b); }, 5, opt.min_seconds);
        gf[i++] = 2.0 * n * n * n / t.best_s / 1e9;
      }
      ops::cpu::set_gemm_backend(ops::cpu::GemmBackend::kBlas);
      const double npg = np.count(n) ? np[n] : 0.0;
      std::printf("%6ld %7d %10.1f GF/s %10.1f GF/s %10.1f GF/s %9.2f %9.2f\n", static_cast<long>(n), threads,
                  gf[0], gf[1], npg, npg > 0 ? gf[0] / npg : 0.0, npg > 0 ? gf[1] / npg : 0.0);
      std::fflush(stdout);
    }
  }
  std::printf("# ops::matmul uses %s by default\n", std::string(ops::cpu::gemm_backend_name()).c_str());
  return 0;
}

}  // namespace gpipe::bench
