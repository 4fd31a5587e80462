// gpipe_bench gemm: W1 of shared/BENCHMARKS.md. fp32 GEMM with each backend
// (gpipe's packed GEMM, OpenBLAS, Eigen) in the same run, at each thread
// count, as best-time GFLOP/s and as a fraction of the FMA peak measured in
// the same run for the active ISA level (GPIPE_CPU_ISA selects it):
//   1. square n x n through ops::matmul, beside numpy (OpenBLAS);
//   2. the Transformer's linear layers x[T, in] -> y[T, out], each as its
//      three GEMMs: forward y = x W^T (A*B^T), input gradient dx = dy W (A*B)
//      and weight gradient dW = dy^T x (A^T*B), through parallel_gemm;
//      with --cold also on operands evicted from the caches.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/cpu_isa.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/gemm_blocking.h"
#include "ops/cpu/gemm_packed.h"
#include "ops/linalg.h"
#include "tools/bench/benchmarks.h"
#include "tools/bench/common.h"

namespace gpipe::bench {
namespace {

using ops::cpu::GemmBackend;
constexpr GemmBackend kBackends[] = {GemmBackend::kPacked, GemmBackend::kBlas, GemmBackend::kEigen};

struct GemmShape {
  std::string name;  // "ffn-up fwd"
  bool ta, tb;
  int64_t m, n, k;
};

const char* op_name(const GemmShape& s) { return s.ta ? "A^T*B" : s.tb ? "A*B^T" : "A*B"; }

// The three GEMMs of a linear layer in -> out over `tokens` rows.
void add_linear(std::vector<GemmShape>& out, const std::string& layer, int64_t tokens, int64_t in,
                int64_t width) {
  out.push_back({layer + " fwd", false, true, tokens, width, in});
  out.push_back({layer + " dx", false, false, tokens, in, width});
  out.push_back({layer + " dW", true, false, width, in, tokens});
}

std::vector<GemmShape> transformer_shapes(const GemmBenchOptions& opt) {
  std::vector<GemmShape> shapes;
  add_linear(shapes, "attn-proj", opt.tokens, opt.dim, opt.dim);  // q, k, v and the output's
  add_linear(shapes, "ffn-up", opt.tokens, opt.dim, 4 * opt.dim);
  add_linear(shapes, "ffn-down", opt.tokens, 4 * opt.dim, opt.dim);
  for (int64_t v : opt.vocab)
    add_linear(shapes, "vocab-" + std::to_string(v), opt.vocab_tokens, opt.vocab_dim, v);
  return shapes;
}

// Median GFLOP/s of the packed GEMM on operands a training step finds cold:
// before each product every core sweeps its share of 64 MiB (a write a
// line), which evicts A, B and C from L2 and, on CPUs with up to 64 MiB of
// L3, from L3. Only the product is timed.
double cold_gflops(const GemmShape& s, const Tensor& a, const Tensor& b, Tensor& c) {
  constexpr int kRepeats = 15;
  static std::vector<float> sweep((size_t{64} << 20) / sizeof(float), 1.0f);
  const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
  std::vector<double> seconds;
  for (int r = 0; r < kRepeats; ++r) {
    parallel_for(0, static_cast<int64_t>(sweep.size()), 1 << 16, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; i += 16) sweep[static_cast<size_t>(i)] += 1.0f;
    });
    const auto t0 = std::chrono::steady_clock::now();
    ops::cpu::parallel_gemm<float>(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data<float>(), lda,
                                   b.data<float>(), ldb, 0.0f, c.data<float>(), s.n);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(seconds.begin(), seconds.begin() + kRepeats / 2, seconds.end());
  return 2.0 * s.m * s.n * s.k / seconds[kRepeats / 2] / 1e9;
}

// Best-time GFLOP/s of each backend for one raw GEMM on the current pool;
// with `cold`, the packed GEMM's cold_gflops last.
std::vector<double> time_backends(const GemmShape& s, double min_seconds, bool cold) {
  const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
  Tensor a = Tensor::randn(Shape{s.m * s.k}, 1), b = Tensor::randn(Shape{s.k * s.n}, 2);
  Tensor c = Tensor::zeros(Shape{s.m * s.n});
  std::vector<double> gf;
  for (GemmBackend backend : kBackends) {
    ops::cpu::set_gemm_backend(backend);
    const Timing t = time_it(
        [&] {
          ops::cpu::parallel_gemm<float>(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data<float>(), lda,
                                         b.data<float>(), ldb, 0.0f, c.data<float>(), s.n);
        },
        3, min_seconds);
    gf.push_back(2.0 * s.m * s.n * s.k / t.best_s / 1e9);
  }
  ops::cpu::set_gemm_backend(GemmBackend::kPacked);
  if (cold) gf.push_back(cold_gflops(s, a, b, c));
  return gf;
}

// GFLOP/s per size of numpy (lib = "numpy", opt.python) or torch.mm (lib =
// "torch", the benchmark venv's python) at `threads`, each result checked.
std::map<int64_t, double> python_gflops(const GemmBenchOptions& opt, int threads,
                                        const std::string& lib) {
  std::map<int64_t, double> np;
  if (lib == "numpy" ? opt.skip_numpy : opt.skip_torch) return np;  // "torch" or "torch-bf16"
  const std::string python = lib == "numpy" ? opt.python : default_torch_python();
  std::string sizes;
  for (int64_t n : opt.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(n);
  const std::string cmd = "OPENBLAS_NUM_THREADS=" + std::to_string(threads) +
                          " OMP_NUM_THREADS=" + std::to_string(threads) + " " + python + " " +
                          data_path("benchmarks/gemm_numpy.py") + " " + sizes + " " +
                          std::to_string(opt.min_seconds) + " " + lib + " " +
                          std::to_string(threads);
  std::vector<std::string> lines;
  try {
    lines = run_lines(cmd);
  } catch (const Error& e) {
    if (lib == "numpy") throw;
    // torch is optional (benchmarks/setup_torch.sh makes its venv): say so, leave the column 0.
    std::printf("# torch.mm not measured (%s): %s\n", python.c_str(), e.what());
    return np;
  }
  for (const std::string& line : lines) {
    GPIPE_CHECK(json_bool(line, "check"), lib, " result failed its Freivalds check: ", line);
    np[static_cast<int64_t>(json_number(line, "n"))] = json_number(line, "gflops");
  }
  return np;
}

void run_square(const GemmBenchOptions& opt, const std::map<int, double>& peak) {
  std::printf("\n# square n x n, C = A @ B through ops::matmul\n");
  std::printf("%6s %7s %11s %6s %11s %11s %11s %11s %11s %11s %12s\n", "n", "threads",
              "packed GF/s", "%peak", "openblas", "eigen", "numpy", "torch.mm", "packed/blas",
              "packed/np", "packed/torch");
  for (int threads : opt.threads) {
    ThreadPool pool(threads);
    IntraOpScope scope(&pool);
    const std::map<int64_t, double> np = python_gflops(opt, threads, "numpy");
    const std::map<int64_t, double> tm = python_gflops(opt, threads, "torch");
    for (int64_t n : opt.sizes) {
      Tensor a = Tensor::randn(Shape{n, n}, 1), b = Tensor::randn(Shape{n, n}, 2);
      Tensor c = Tensor::empty(Shape{n, n});
      std::vector<double> gf;
      for (GemmBackend backend : kBackends) {
        ops::cpu::set_gemm_backend(backend);
        const Timing t = time_it([&] { c = ops::matmul(a, b); }, 5, opt.min_seconds);
        gf.push_back(2.0 * n * n * n / t.best_s / 1e9);
      }
      ops::cpu::set_gemm_backend(GemmBackend::kPacked);
      const double npg = np.count(n) ? np.at(n) : 0.0, tmg = tm.count(n) ? tm.at(n) : 0.0;
      std::printf("%6ld %7d %11.1f %5.0f%% %11.1f %11.1f %11.1f %11.1f %11.2f %11.2f %12.2f\n",
                  static_cast<long>(n), threads, gf[0], 100 * gf[0] / peak.at(threads), gf[1],
                  gf[2], npg, tmg, gf[0] / gf[1], npg > 0 ? gf[0] / npg : 0.0,
                  tmg > 0 ? gf[0] / tmg : 0.0);
      std::fflush(stdout);
    }
  }
}

void run_transformer_shapes(const GemmBenchOptions& opt, const std::map<int, double>& peak) {
  std::printf(
      "\n# Transformer linear layers: FFN tokens=%ld d=%ld (d -> 4d -> d); output projection "
      "tokens=%ld "
      "d=%ld -> vocab; through parallel_gemm\n",
      static_cast<long>(opt.tokens), static_cast<long>(opt.dim),
      static_cast<long>(opt.vocab_tokens), static_cast<long>(opt.vocab_dim));
  if (opt.cold)
    std::printf(
        "# cold: the packed GEMM's median after every core swept 64 MiB (operands out of the "
        "caches, as a training step finds them)\n");
  std::printf("%-16s %6s %6s %6s %6s %7s %11s %6s %8s %11s %11s %11s%s\n", "gemm", "op", "m", "n",
              "k", "threads", "packed GF/s", "%peak", "speedup", "openblas", "eigen", "packed/blas",
              opt.cold ? "   cold GF/s  cold%" : "");
  for (const GemmShape& s : transformer_shapes(opt)) {
    double one_thread = 0;
    for (int threads : opt.threads) {
      ThreadPool pool(threads);
      IntraOpScope scope(&pool);
      const std::vector<double> gf = time_backends(s, opt.shape_min_seconds, opt.cold);
      if (threads == 1) one_thread = gf[0];
      std::printf("%-16s %6s %6ld %6ld %6ld %7d %11.1f %5.0f%% %7.2fx %11.1f %11.1f %11.2f",
                  s.name.c_str(), op_name(s), static_cast<long>(s.m), static_cast<long>(s.n),
                  static_cast<long>(s.k), threads, gf[0], 100 * gf[0] / peak.at(threads),
                  one_thread > 0 ? gf[0] / one_thread : 0.0, gf[1], gf[2], gf[0] / gf[1]);
      if (opt.cold) std::printf(" %11.1f %5.0f%%", gf[3], 100 * gf[3] / peak.at(threads));
      std::printf("\n");
      std::fflush(stdout);
    }
  }
}

// bfloat16: gpipe's three paths (AMX-BF16 tiles and AVX512_BF16 dot
// products where the CPU has them; widened to float32 while packing) against
// its float32 GEMM on the same values and torch.mm on bfloat16 tensors. GF/s
// count 2mnk as for float32; %peak is the fastest path's against the float32
// FMA peak (the dot path's own peak is twice it, AMX's far more).
void run_bf16(const GemmBenchOptions& opt, const std::map<int, double>& peak) {
  const bool dot = detected_bf16_dot(), amx = detected_amx();
  std::printf(
      "\n# bfloat16 operands, float32 C: packed_gemm_bf16 (amx: AMX-BF16 tiles, %s; dot: "
      "AVX512_BF16%s; convert: widened to float32 while packing) vs the float32 packed GEMM on "
      "the same values\n",
      amx_status().c_str(), dot ? "" : ", not on this CPU");
  if (amx) {
    const auto& ks = ops::cpu::packed::kAmxBf16Kernels;
    const std::string line =
        ops::cpu::gemm_blocking_description(ks.mr, ks.nr, 2, ks.kc_cap, ks.b_panel_in_l1);
    // Under the model, small C's over the pool go deeper (Note [Tile kernels' blocking]).
    const bool model = line.find("(model") != std::string::npos;
    std::printf("# amx blocking: %s%s\n", line.c_str(),
                model
                    ? detail::concat("; products over the pool with C of at most 65536 floats: kc ",
                                     ks.kc_cap)
                          .c_str()
                    : "");
  }
  std::printf("%-16s %6s %6s %6s %7s %11s %11s %11s %11s %6s %11s %9s %9s\n", "gemm", "m", "n", "k",
              "threads", "fp32 GF/s", "bf16 amx", "bf16 dot", "bf16 conv", "%peak", "torch bf16",
              "best/fp32", "best/torch");
  std::vector<GemmShape> shapes;
  if (!opt.skip_square)
    for (int64_t n : opt.sizes)
      shapes.push_back({"square " + std::to_string(n), false, false, n, n, n});
  if (!opt.skip_transformer)
    for (const GemmShape& s : transformer_shapes(opt)) shapes.push_back(s);
  for (int threads : opt.threads) {
    ThreadPool pool(threads);
    IntraOpScope scope(&pool);
    const std::map<int64_t, double> tm =
        opt.skip_square ? std::map<int64_t, double>{} : python_gflops(opt, threads, "torch-bf16");
    for (const GemmShape& s : shapes) {
      const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
      const Tensor a32 = Tensor::randn(Shape{s.m * s.k}, 1),
                   b32 = Tensor::randn(Shape{s.k * s.n}, 2);
      const Tensor a16 = a32.to(DType::kBFloat16), b16 = b32.to(DType::kBFloat16);
      const Tensor af = a16.to(DType::kFloat32), bf = b16.to(DType::kFloat32);
      Tensor c = Tensor::zeros(Shape{s.m * s.n});
      const auto* pa = reinterpret_cast<const uint16_t*>(a16.data<bfloat16>());
      const auto* pb = reinterpret_cast<const uint16_t*>(b16.data<bfloat16>());
      auto gflops = [&](auto&& fn) {
        return 2.0 * s.m * s.n * s.k / time_it(fn, 3, opt.shape_min_seconds).best_s / 1e9;
      };
      const double f32 = gflops([&] {
        ops::cpu::packed_sgemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, af.data<float>(), lda,
                               bf.data<float>(), ldb, 0.0f, c.data<float>(), s.n, true);
      });
      auto bf16 = [&](ops::cpu::Bf16Path path) {
        return gflops([&] {
          ops::cpu::packed_gemm_bf16(s.ta, s.tb, s.m, s.n, s.k, 1.0f, pa, lda, pb, ldb, 0.0f,
                                     c.data<float>(), s.n, true, path);
        });
      };
      const double x = amx ? bf16(ops::cpu::Bf16Path::kAmx) : 0.0;
      const double d = dot ? bf16(ops::cpu::Bf16Path::kDot) : 0.0;
      const double cv = bf16(ops::cpu::Bf16Path::kConvert);
      const double best = std::max({x, d, cv});
      const bool square = s.name.rfind("square", 0) == 0;
      const double t = square && tm.count(s.m) ? tm.at(s.m) : 0.0;
      std::printf(
          "%-16s %6ld %6ld %6ld %7d %11.1f %11.1f %11.1f %11.1f %5.0f%% %11.1f %9.2f %9.2f\n",
          s.name.c_str(), static_cast<long>(s.m), static_cast<long>(s.n), static_cast<long>(s.k),
          threads, f32, x, d, cv, 100 * best / peak.at(threads), t, best / f32,
          t > 0 ? best / t : 0.0);
      std::fflush(stdout);
    }
  }
}

// Note [GEMM blocking]'s model against a grid of kc x nc (mc as the model
// says) on square products, float32 and (where the CPU has them) bfloat16 dot
// products: GF/s of each, the model's at its share of the best.
void run_blocking_sweep(const GemmBenchOptions& opt, const std::map<int, double>& peak) {
  const int threads = opt.threads.front();
  ThreadPool pool(threads);
  IntraOpScope scope(&pool);
  const auto& ks = ops::cpu::packed_kernels();
  std::printf("\n# blocking sweep, %d thread%s (GF/s; * = the model's choice)\n", threads,
              threads > 1 ? "s" : "");
  std::printf("%-10s %6s %5s %5s %5s %9s %6s\n", "operands", "n", "kc", "nc", "mc", "GF/s",
              "%peak");
  // float32, then the bfloat16 kernels this CPU has.
  for (const ops::cpu::Bf16Path path :
       {ops::cpu::Bf16Path::kConvert, ops::cpu::Bf16Path::kDot, ops::cpu::Bf16Path::kAmx}) {
    const bool bf16 = path != ops::cpu::Bf16Path::kConvert;
    if (path == ops::cpu::Bf16Path::kDot && !cpu_bf16_dot()) continue;
    if (path == ops::cpu::Bf16Path::kAmx && !cpu_amx()) continue;
    const auto& dot = path == ops::cpu::Bf16Path::kAmx ? ops::cpu::packed::kAmxBf16Kernels
                                                       : ops::cpu::packed::kAvx512Bf16Kernels;
    const char* label = !bf16                              ? "float32"
                        : path == ops::cpu::Bf16Path::kAmx ? "bf16-amx"
                                                           : "bf16-dot";
    const int mr = bf16 ? dot.mr : ks.mr, nr = bf16 ? dot.nr : ks.nr, es = bf16 ? 2 : 4;
    const int cap = bf16 ? dot.kc_cap : ks.kc_cap;
    const ops::cpu::GemmBlocking model =
        ops::cpu::model_blocking(cpu_caches(), mr, nr, es, cap, bf16 && dot.b_panel_in_l1);
    // Timed through set_gemm_blocking, which holds for every product: the
    // model's row leaves out the AMX small-C depth (Note [Tile kernels'
    // blocking]), which these square sizes (C over 64K floats) never take.
    std::vector<ops::cpu::GemmBlocking> grid = {model};
    for (int kc : {128, 256, 384, 512, 768})
      for (int nc : {256, 512, 768, 1024, 1536}) {
        const ops::cpu::GemmBlocking b{kc, nc / nr * nr, model.mc};
        if (!(b == model)) grid.push_back(b);
      }
    for (int64_t n : opt.sizes) {
      const Tensor a32 = Tensor::randn(Shape{n * n}, 1), b32 = Tensor::randn(Shape{n * n}, 2);
      const Tensor a16 = a32.to(DType::kBFloat16), b16 = b32.to(DType::kBFloat16);
      Tensor c = Tensor::zeros(Shape{n * n});
      // Three passes over the grid, best of each blocking's passes: a burst of
      // noise on a shared machine then costs one pass, not a verdict.
      std::vector<double> gf(grid.size(), 0.0);
      for (int pass = 0; pass < 3; ++pass)
        for (size_t g = 0; g < grid.size(); ++g) {
          ops::cpu::set_gemm_blocking(grid[g]);
          const Timing t = time_it(
              [&] {
                if (bf16)
                  ops::cpu::packed_gemm_bf16(
                      false, false, n, n, n, 1.0f,
                      reinterpret_cast<const uint16_t*>(a16.data<bfloat16>()), n,
                      reinterpret_cast<const uint16_t*>(b16.data<bfloat16>()), n, 0.0f,
                      c.data<float>(), n, true, path);
                else
                  ops::cpu::packed_sgemm(false, false, n, n, n, 1.0f, a32.data<float>(), n,
                                         b32.data<float>(), n, 0.0f, c.data<float>(), n, true);
              },
              2, opt.shape_min_seconds / 3);
          gf[g] = std::max(gf[g], 2.0 * n * n * n / t.best_s / 1e9);
        }
      size_t best = 0;
      for (size_t g = 0; g < grid.size(); ++g) {
        if (gf[g] > gf[best]) best = g;
        std::printf("%-10s %6ld %5d %5d %5d %9.1f %5.0f%%%s\n", label, static_cast<long>(n),
                    grid[g].kc, grid[g].nc, grid[g].mc, gf[g], 100 * gf[g] / peak.at(threads),
                    g == 0 ? " *" : "");
      }
      const double model_gf = gf[0];
      const ops::cpu::GemmBlocking best_b = grid[best];
      ops::cpu::set_gemm_blocking(std::nullopt);
      std::printf(
          "# %s n=%ld: model kc %d nc %d at %.1f GF/s, %.0f%% of the grid's best (kc %d "
          "nc %d, %.1f GF/s)\n",
          label, static_cast<long>(n), model.kc, model.nc, model_gf, 100 * model_gf / gf[best],
          best_b.kc, best_b.nc, gf[best]);
    }
  }
}

}  // namespace

int run_gemm(const GemmBenchOptions& opt) {
  const CpuIsa isa = cpu_isa();
  const auto& ks = ops::cpu::packed_kernels();
  std::printf("# W1 gemm, fp32, best time; %s\n", opt.env_note.c_str());
  std::printf("# CPU: %s\n", cpu_description().c_str());
  std::printf(
      "# active ISA: %s (GPIPE_CPU_ISA=avx512|avx2|baseline forces one); GEMM path: %s, %dx%d "
      "tile\n# blocking: %s (GPIPE_GEMM_BLOCKING=kc,nc,mc overrides)\n",
      cpu_isa_name(isa), std::string(ops::cpu::gemm_backend_name()).c_str(), ks.mr, ks.nr,
      ops::cpu::gemm_blocking_description(ks.mr, ks.nr, 4, ks.kc_cap).c_str());
  std::map<int, double> peak;
  for (int threads : opt.threads) peak[threads] = measure_fma_peak(isa, threads, 0.5);
  std::printf("# measured %s FMA peak:", cpu_isa_name(isa));
  for (const auto& [threads, gf] : peak)
    std::printf(" %d thread%s %.1f GF/s;", threads, threads > 1 ? "s" : "", gf);
  std::printf(" %%peak is against the figure for the row's thread count\n");
  if (opt.sweep_blocking) {
    run_blocking_sweep(opt, peak);
    return 0;
  }
  if (!opt.skip_square) run_square(opt, peak);
  if (!opt.skip_transformer) run_transformer_shapes(opt, peak);
  if (!opt.skip_bf16) run_bf16(opt, peak);
  std::printf("# ops::matmul uses %s by default\n",
              std::string(ops::cpu::gemm_backend_name()).c_str());
  return 0;
}

}  // namespace gpipe::bench
