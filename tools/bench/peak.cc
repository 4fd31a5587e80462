// gpipe_bench peak: the fp32 FMA peak each ISA level reaches on this CPU, the
// yardstick for the GEMM figures. Each thread runs 12 independent
// accumulator chains (more than pipes x latency on any current x86 core)
// through fused multiply-adds on registers only; the baseline level has no
// FMA and counts SSE mul + add pairs instead.
//
// The loops carry __attribute__((target)) and use nothing but intrinsics, so
// nothing built for AVX-512 here can be picked up by ordinary code (see
// Note [GEMM ISA files] in ops/cpu/gemm_kernels.h).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/cpu_isa.h"
#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/gemm_blocking.h"
#include "ops/cpu/gemm_packed.h"
#include "tools/bench/benchmarks.h"

namespace gpipe::bench {
namespace {

constexpr int kChains = 12;

__attribute__((target("avx512f"))) float fma_loop_avx512(int64_t iters) {
  __m512 acc[kChains];
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-6f);
#pragma GCC unroll 12
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  for (int64_t t = 0; t < iters; ++t)
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  __m512 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm512_add_ps(sum, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  return lanes[0] + lanes[15];
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(int64_t iters) {
  __m256 acc[kChains];
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-6f);
#pragma GCC unroll 12
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  for (int64_t t = 0; t < iters; ++t)
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  __m256 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm256_add_ps(sum, acc[i]);
  return _mm_cvtss_f32(_mm256_castps256_ps128(sum));
}

float mul_add_loop_sse(int64_t iters) {
  __m128 acc[kChains];
  const __m128 x = _mm_set1_ps(0.999999f), y = _mm_set1_ps(1e-6f);
#pragma GCC unroll 12
  for (int i = 0; i < kChains; ++i) acc[i] = _mm_set1_ps(static_cast<float>(i));
  for (int64_t t = 0; t < iters; ++t)
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm_add_ps(_mm_mul_ps(acc[i], x), y);
  __m128 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm_add_ps(sum, acc[i]);
  return _mm_cvtss_f32(sum);
}

// Flops one iteration of the loop for `isa` does.
double flops_per_iter(CpuIsa isa) {
  const int lanes = isa == CpuIsa::kAvx512 ? 16 : isa == CpuIsa::kAvx2 ? 8 : 4;
  return 2.0 * lanes * kChains;
}

float run_loop(CpuIsa isa, int64_t iters) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return fma_loop_avx512(iters);
    case CpuIsa::kAvx2:
      return fma_loop_avx2(iters);
    case CpuIsa::kBaseline:
      break;
  }
  return mul_add_loop_sse(iters);
}

volatile float g_sink;

// Seconds for `threads` copies of the loop, each `iters` long, on the pool.
double time_loops(CpuIsa isa, int threads, int64_t iters) {
  ThreadPool pool(threads);
  IntraOpScope scope(&pool);
  const auto t0 = std::chrono::steady_clock::now();
  parallel_for(0, threads, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) g_sink = run_loop(isa, iters);
  });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

double measure_fma_peak(CpuIsa isa, int threads, double seconds) {
  GPIPE_CHECK(isa <= detected_cpu_isa(), "FMA peak: this CPU has no ", cpu_isa_name(isa), " (",
              cpu_description(), ")");
  int64_t iters = 1 << 20;
  while (time_loops(isa, 1, iters) < 0.05) iters *= 2;  // calibrate: ~50 ms per run
  iters = static_cast<int64_t>(iters * (seconds / 5) / 0.05) + 1;
  double best = 1e30;
  for (int r = 0; r < 5; ++r) best = std::min(best, time_loops(isa, threads, iters));
  return flops_per_iter(isa) * static_cast<double>(iters) * threads / best / 1e9;
}

// Note [Kernel in cache]. The ceiling a GEMM's tiles can reach here: each
// thread runs the active level's float32 micro-kernel (the packed driver's)
// at the driver's depth kc over one packed A panel and eight B panels (512
// KB at 14 x 32 and kc 512), which stay in L1 and L2, into a C that stays in
// L1; no packing, no edges, nothing waiting on memory. Best of 10 runs of
// about seconds / 10. On a 2-core Intel Xeon (Sapphire Rapids class) it
// reached 84-92% of measure_fma_peak, run to run; a whole product reaches
// less (packing, C, operands arriving from memory).
double measure_gemm_kernel_rate(int threads, double seconds) {
  const auto& ks = ops::cpu::packed_kernels();
  const int64_t kDepth = ops::cpu::gemm_blocking(ks.mr, ks.nr, 4, ks.kc_cap).kc;
  constexpr int64_t kPanels = 8;
  const int64_t a_len = ks.mr * kDepth, b_len = kDepth * ks.nr * kPanels,
                c_len = ks.mr * ks.nr * kPanels;
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  const auto aligned = [](int64_t count) {
    const size_t bytes = (static_cast<size_t>(count) * sizeof(float) + 63) / 64 * 64;
    float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
    GPIPE_CHECK(p != nullptr, "kernel rate: out of memory for ", bytes, " bytes");
    return std::unique_ptr<float, Free>(p);
  };
  std::vector<std::unique_ptr<float, Free>> a, b, c;
  for (int t = 0; t < threads; ++t) {
    a.push_back(aligned(a_len));
    b.push_back(aligned(b_len));
    c.push_back(aligned(c_len));
    for (int64_t i = 0; i < a_len; ++i) a.back().get()[i] = static_cast<float>(i % 100) / 100.0f;
    for (int64_t i = 0; i < b_len; ++i) b.back().get()[i] = static_cast<float>(i % 97) / 100.0f;
  }
  ThreadPool pool(threads);
  IntraOpScope scope(&pool);
  const auto run = [&](int64_t rounds) {
    const auto t0 = std::chrono::steady_clock::now();
    parallel_for(0, threads, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t)
        for (int64_t r = 0; r < rounds; ++r)
          for (int64_t j = 0; j < kPanels; ++j)
            ks.kernel(kDepth, a[t].get(), b[t].get() + j * kDepth * ks.nr, c[t].get() + j * ks.nr,
                      ks.nr * kPanels, 1.0f, 0.0f);
    });
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  constexpr int kRuns = 10;  // short runs: the best finds the host's quiet moments
  int64_t rounds = 16;
  while (run(rounds) < 0.02) rounds *= 2;  // calibrate: ~20 ms per run
  rounds = std::max<int64_t>(1, static_cast<int64_t>(rounds * (seconds / kRuns) / 0.02));
  double best = 1e30;
  for (int r = 0; r < kRuns; ++r) best = std::min(best, run(rounds));
  g_sink = c[0].get()[0];
  return 2.0 * ks.mr * ks.nr * kDepth * kPanels * static_cast<double>(rounds) * threads / best /
         1e9;
}

double measure_bandwidth(int threads, double seconds) {
  const int64_t n = int64_t{16} << 20;  // 64 MiB of float per array
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  ThreadPool pool(threads);
  IntraOpScope scope(&pool);
  auto triad = [&] {
    parallel_for(0, n, n / (4 * threads), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) a[i] = b[i] + 0.5f * c[i];
    });
  };
  triad();  // first touch
  double best = 1e30;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < 50; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    triad();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (r >= 3 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds)
      break;
  }
  g_sink = a[n / 2];
  return 12.0 * static_cast<double>(n) / best / 1e9;
}

int run_peak(const PeakBenchOptions& opt) {
  const CpuIsa active = cpu_isa();
  std::printf("# fp32 FMA peak, %d independent chains per thread, best of 5; %s\n", kChains,
              opt.env_note.c_str());
  std::printf("# CPU: %s\n", cpu_description().c_str());
  std::printf("%9s %7s %10s %14s\n", "isa", "threads", "GFLOP/s", "per thread");
  std::vector<double> active_peak(opt.threads.size(), 0.0);
  for (int level = static_cast<int>(detected_cpu_isa()); level >= 0; --level) {
    const CpuIsa isa = static_cast<CpuIsa>(level);
    for (size_t i = 0; i < opt.threads.size(); ++i) {
      const int threads = opt.threads[i];
      const double gf = measure_fma_peak(isa, threads, opt.seconds);
      if (isa == active) active_peak[i] = gf;
      std::printf("%9s %7d %10.1f %14.1f\n", cpu_isa_name(isa), threads, gf, gf / threads);
      std::fflush(stdout);
    }
  }
  std::printf("# memory bandwidth (triad over 3 x 64 MiB, 12 bytes per element):\n");
  for (int threads : opt.threads)
    std::printf("%9s %7d %10.1f GB/s\n", "memory", threads,
                measure_bandwidth(threads, opt.seconds));
  std::printf(
      "# the float32 GEMM micro-kernel (%s, %d x %d) on operands in the caches (Note "
      "[Kernel in cache]):\n",
      ops::cpu::packed_kernels().name, ops::cpu::packed_kernels().mr,
      ops::cpu::packed_kernels().nr);
  for (size_t i = 0; i < opt.threads.size(); ++i) {
    const double rate = measure_gemm_kernel_rate(opt.threads[i], opt.seconds);
    std::printf("%9s %7d %10.1f GF/s, %.1f%% of the FMA peak above\n", "kernel", opt.threads[i],
                rate, 100 * rate / active_peak[i]);
  }
  std::printf(
      "# GEMM goal: >= 85%% of the 1-thread figure of the active level (%s), >= 1.9x that at 2 "
      "threads\n",
      cpu_isa_name(active));
  return 0;
}

}  // namespace gpipe::bench
