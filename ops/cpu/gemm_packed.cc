// Packed fp32 GEMM driver (Goto/BLIS blocking, row-major form).
//
// C is cut into blocks of mc rows; k into slices of kc; n into chunks of at
// most kNChunk columns. For each (rows, columns, k-slice) block, op(A) is
// packed into mr-row panels (p-major: a[p * mr + i]) and op(B) into nr-column
// panels (b[p * nr + j]), zero-padded to full tiles, and every mr x nr tile
// of C gets one micro-kernel call. Inside a block the loop runs over A
// panels, and for each over the nc columns of B that fit in L2, so one A panel
// (mr x kc) stays in L1 while the B block streams from L2. Where op(A) = A
// and the level has the kernels, A is not packed: the tiles read its rows,
// mr of them a kc-long stretch each, which stay in L1 the same way (Note
// [Direct A] in gemm_kernels.h).
//
// Packing: gemm_pack.cc. Splitting a block over the pool: gemm_split.cc
// (Note [Shared B panels]).
//
// Buffers are thread-local to the calling thread, 64-byte aligned, and grow
// only: no allocation per call in the steady state.
#include "ops/cpu/gemm_packed.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/cpu_isa.h"
#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/gemm_blocking.h"
#include "ops/cpu/gemm_driver.h"

namespace gpipe::ops::cpu {
namespace {

using namespace gemm_driver;

constexpr int64_t kNChunk = 8192;  // columns of op(B) packed at once (B buffer <= kc * kNChunk)
constexpr double kParallelFlops = 4e6;  // below this a product runs on the caller
constexpr int kMaxTile = 32 * 32;       // largest mr * nr of any kernel set (AMX's)

}  // namespace

// The driver's tiles (gemm_driver.h), shared with gemm_split.cc.
namespace gemm_driver {

void run_tile(const Problem& P, const Engine& ks, const Block& blk, int64_t ip, int64_t jp) {
  const int mr = ks.mr, nr = ks.nr;
  const char* pa = blk.a_panel(ks, ip);
  const char* pb = blk.b_panel(ks, jp);
  const int64_t i = blk.i0 + ip * mr, j = blk.j0 + jp * nr;
  const int64_t rows = std::min<int64_t>(mr, blk.i0 + blk.rows - i);
  const int64_t cols = std::min<int64_t>(nr, blk.j0 + blk.cols - j);
  const float* fb = reinterpret_cast<const float*>(pb);
  // Note [Direct A] in gemm_kernels.h: the tile's first row of A at the slice's first depth.
  const float* da = P.direct_a ? static_cast<const float*>(P.a) + i * P.lda + blk.p0 : nullptr;
  alignas(64) float tile[kMaxTile];
  const bool last_slice = blk.p0 + blk.kc == P.k;
  // A short panel's rows straight into C where the level has a kernel for
  // them (Note [Short panels] in gemm_kernels.h), else through the tile, as
  // the packed panel goes: the direct kernel writes only the panel's rows,
  // but the tile's two roundings (alpha acc, then + beta C) are the bits
  // (Note [Direct A]).
  const bool short_rows = rows < mr && ks.ks != nullptr && ks.ks->kernel_rows != nullptr;
  const auto compute = [&](float* dst, int64_t ld, float beta) {
    if (da != nullptr)
      ks.ks->kernel_direct(static_cast<int>(rows), blk.kc, da, P.lda, fb, dst, ld, P.alpha, beta);
    else if (short_rows)
      ks.ks->kernel_rows(static_cast<int>(rows), blk.kc, reinterpret_cast<const float*>(pa), fb,
                         dst, ld, P.alpha, beta);
    else
      ks.micro(blk.kc, pa, pb, dst, ld, P.alpha, beta);
  };
  if (P.ct) {  // Note [Transposed small products]: the tile goes to C through a transpose
    compute(tile, nr, 0.0f);
    for (int64_t q = 0; q < cols; ++q) {
      float* cq = P.c + (j + q) * P.ldc + i;
      if (blk.beta == 0.0f)
        for (int64_t r = 0; r < rows; ++r) cq[r] = tile[r * nr + q];
      else
        for (int64_t r = 0; r < rows; ++r) cq[r] = tile[r * nr + q] + blk.beta * cq[r];
    }
    return;
  }
  if (P.c == nullptr) {  // Note [bfloat16 results], one k-slice: the tile goes out rounded
    compute(tile, nr, 0.0f);
    P.epilogue(*P.ep, tile, nr, i, j, rows, cols);
    return;
  }
  float* c = P.c + (i - P.c_row0) * P.ldc + (j - P.c_col0);
  if (cols == nr && rows == mr && P.ep != nullptr && last_slice && ks.ks != nullptr &&
      ks.ks->kernel_ep != nullptr && in_registers(*P.ep)) {  // Note [Epilogue in registers]
    if (da != nullptr)
      ks.ks->kernel_direct_ep(blk.kc, da, P.lda, fb, c, P.ldc, P.alpha, blk.beta, *P.ep, i, j);
    else
      ks.ks->kernel_ep(blk.kc, reinterpret_cast<const float*>(pa), fb, c, P.ldc, P.alpha, blk.beta,
                       *P.ep, i, j);
    return;
  }
  if (cols == nr && (rows == mr || short_rows)) {  // straight into C
    compute(c, P.ldc, blk.beta);
  } else {
    compute(tile, nr, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      float* cr = c + r * P.ldc;
      const float* tr = tile + r * nr;
      if (blk.beta == 0.0f)
        for (int64_t q = 0; q < cols; ++q) cr[q] = tr[q];
      else
        for (int64_t q = 0; q < cols; ++q) cr[q] = tr[q] + blk.beta * cr[q];
    }
  }
  if (P.ep != nullptr && last_slice) P.epilogue(*P.ep, c, P.ldc, i, j, rows, cols);
}

}  // namespace gemm_driver

namespace {

// A switch read from the environment variable `name` ("0" or "1") at first
// use, else `fallback`.
bool env_switch(const char* name, bool fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  const std::string v(text);
  GPIPE_CHECK(v == "0" || v == "1", name, "='", v, "': expected 0 or 1");
  return v == "1";
}

std::atomic<bool>& direct_a_flag() {
  static std::atomic<bool> on{env_switch("GPIPE_GEMM_DIRECT_A", true)};
  return on;
}
std::atomic<int64_t> g_direct_a_products{0};

// Note [Prefetched A sources] in gemm_pack.cc: on by default but on Intel.
std::atomic<bool>& prefetch_a_flag() {
  static std::atomic<bool> on{
      env_switch("GPIPE_GEMM_PREFETCH_A", cpu_vendor() != CpuVendor::kIntel)};
  return on;
}

}  // namespace

int64_t direct_a_products() { return g_direct_a_products.load(std::memory_order_relaxed); }
bool direct_a_enabled() { return direct_a_flag().load(std::memory_order_relaxed); }
void set_direct_a(bool on) { direct_a_flag().store(on, std::memory_order_relaxed); }
bool prefetch_a_enabled() { return prefetch_a_flag().load(std::memory_order_relaxed); }
void set_prefetch_a(bool on) { prefetch_a_flag().store(on, std::memory_order_relaxed); }

namespace {

void scale_c(const Problem& P) {
  for (int64_t i = 0; i < P.m; ++i) {
    float* ci = P.c + i * P.ldc;
    if (P.beta == 0.0f)
      std::fill(ci, ci + P.n, 0.0f);
    else if (P.beta != 1.0f)
      for (int64_t j = 0; j < P.n; ++j) ci[j] *= P.beta;
  }
}

const KernelSet& kernels_for(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return packed::kAvx512Kernels;
    case CpuIsa::kAvx2:
      return packed::kAvx2Kernels;
    case CpuIsa::kBaseline:
      break;
  }
  return packed::kBaselineKernels;
}

}  // namespace

const KernelSet& packed_kernels() { return kernels_for(cpu_isa()); }

namespace {

// Float32 scratch for Note [bfloat16 results] over several k-slices: C's
// blocks of at most this many bytes (the composed form's row blocks, Note
// [16-bit linear] in ops/linalg.cc, were as large).
constexpr int64_t kScratchBytes = 4 << 20;

void run_product(Problem P, const Engine& ks, bool parallel) {
  int64_t m = P.m, n = P.n;
  const int64_t k = P.k;
  if (m <= 0 || n <= 0) return;
  const bool to_bf16 = P.ep != nullptr && P.ep->bf16_out != nullptr;
  if (k <= 0 || P.alpha == 0.0f) {
    if (to_bf16) {  // zeros, through the epilogue a row at a time (it writes only bf16_out)
      std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
      for (int64_t i = 0; i < m; ++i) P.epilogue(*P.ep, zeros.data(), n, i, 0, 1, n);
      return;
    }
    scale_c(P);
    if (P.ep != nullptr) P.epilogue(*P.ep, P.c, P.ldc, 0, 0, m, n);
    return;
  }
  // Note [Transposed small products]. A product with few rows or columns
  // (a convolution's 8 output channels, a 4-column im2col block) fills the
  // mr x nr tiles badly in one orientation. C^T = op(B)^T op(A)^T swaps the
  // roles of m and n; when that pads far less, the transposed product is
  // computed and its tiles are written into C through a transpose.
  const auto padded = [&](int64_t rows, int64_t cols) {
    return static_cast<double>(ceil_div(rows, ks.mr) * ks.mr) *
           static_cast<double>(ceil_div(cols, ks.nr) * ks.nr);
  };
  if (P.ep == nullptr && padded(n, m) < 0.8 * padded(m, n)) {  // the epilogue works on rows
    P = Problem{!P.tb, !P.ta, n,      m,   k,     P.alpha,     P.b,  P.ldb,
                P.a,   P.lda, P.beta, P.c, P.ldc, /*ct=*/true, P.src};
    m = P.m;
    n = P.n;
  }
  const int threads = parallel && 2.0 * m * n * k >= kParallelFlops ? intra_op_threads() : 1;
  P.direct_a = P.src == Src::kF32 && !P.ta && ks.ks != nullptr && ks.ks->kernel_direct != nullptr &&
               ks.ks->kernel_direct_ep != nullptr && direct_a_enabled();
  if (P.direct_a) g_direct_a_products.fetch_add(1, std::memory_order_relaxed);
  P.prefetch_a = prefetch_a_enabled();

  // Even splits: no thin last block; the dot kernel's slices are whole pairs
  // but for the last.
  const int64_t k_slices = ceil_div(k, ks.depth_for(m, n, parallel));
  const int64_t kc_max = ks.depth(ceil_div(k, k_slices));
  const int64_t n_chunks = ceil_div(n, kNChunk),
                nc_max = ceil_div(ceil_div(n, n_chunks), ks.nr) * ks.nr;
  // By Note [bfloat16 results], one k-slice needs no C (each tile is rounded
  // from the stack); several sum into a scratch block of C, so blocks of
  // rows small enough for it. Neither changes a sum.
  const bool scratch = to_bf16 && k_slices > 1;
  int64_t mc = ks.mc;
  if (scratch) mc = std::min<int64_t>(mc, std::max<int64_t>(ks.mr, kScratchBytes / 4 / nc_max));
  const int64_t m_blocks = ceil_div(m, mc), mc_max = ceil_div(ceil_div(m, m_blocks), ks.mr) * ks.mr;
  if (to_bf16) {
    P.c = nullptr;
    if (scratch) {
      static thread_local AlignedFloats c_scratch;
      P.c = c_scratch.get(mc_max * nc_max);
      P.ldc = nc_max;
    }
  }

  if (split_k_fits(P, ks, threads, k_slices, m_blocks == 1 && n_chunks == 1 && !scratch)) {
    run_split_k(P, ks, kc_max);
    return;
  }
  Workspace& ws = thread_workspace();
  char* pa = packed_room(ws.a, ks, mc_max * kc_max);
  char* pb = packed_room(ws.b, ks, nc_max * kc_max);
  for (int64_t i0 = 0; i0 < m; i0 += mc_max) {
    for (int64_t j0 = 0; j0 < n; j0 += nc_max) {
      if (scratch) {  // the scratch holds this block of C
        P.c_row0 = i0;
        P.c_col0 = j0;
      }
      for (int64_t p0 = 0; p0 < k; p0 += kc_max) {
        const Block blk = make_block(ks, i0, std::min(mc_max, m - i0), j0, std::min(nc_max, n - j0),
                                     p0, std::min(kc_max, k - p0), p0 == 0 ? P.beta : 1.0f, pa, pb);
        run_block(P, ks, blk, ws, threads);
      }
    }
  }
}

}  // namespace

void packed_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                  bool parallel, const GemmEpilogue* epilogue) {
  Problem p{ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
  if (epilogue != nullptr && epilogue->active()) {
    GPIPE_ASSERT(beta == 0.0f, "packed_sgemm: an epilogue needs beta = 0");
    p.ep = epilogue;
    p.epilogue = packed_kernels().epilogue;
  }
  run_product(p, Engine::of(packed_kernels()), parallel);
}

namespace {

std::atomic<const packed::Bf16DotKernelSet*> g_amx_kernels{nullptr};  // tests' override
std::atomic<bool> g_amx_as_auto{false};

// The path kAuto resolves to, checked; and its engine.
Bf16Path resolve(Bf16Path path) {
  if (path == Bf16Path::kAuto) return bf16_path();
  GPIPE_CHECK(path != Bf16Path::kDot || detected_bf16_dot(),
              "bfloat16 GEMM: the dot-product path needs AVX512_BF16, which this CPU lacks");
  if (path != Bf16Path::kAmx) return path;
  if (g_amx_kernels.load() != nullptr)  // emulated: the AVX-512 packers
    GPIPE_CHECK(detected_bf16_dot(), "bfloat16 GEMM: the emulated AMX path needs AVX512_BF16");
  else
    GPIPE_CHECK(detected_amx(),
                "bfloat16 GEMM: the AMX path needs AMX-BF16 tiles, which are not usable here: ",
                amx_status());
  return path;
}
Engine engine_for(Bf16Path path) {
  switch (path) {
    case Bf16Path::kAmx: {
      const packed::Bf16DotKernelSet* emulated = g_amx_kernels.load();
      return Engine::of(emulated != nullptr ? *emulated : packed::kAmxBf16Kernels);
    }
    case Bf16Path::kDot:
      return Engine::of(packed::kAvx512Bf16Kernels);
    default:
      return Engine::of(packed_kernels());
  }
}
Src src_for(Bf16Path path) {
  return path == Bf16Path::kConvert ? Src::kBf16Convert : Src::kBf16Dot;
}

}  // namespace

void packed_gemm_bf16_out(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
                          int64_t lda, const uint16_t* b, int64_t ldb, const GemmEpilogue& epilogue,
                          bool parallel, Bf16Path path) {
  GPIPE_ASSERT(epilogue.bf16_out != nullptr && epilogue.residual == nullptr,
               "packed_gemm_bf16_out: needs bf16_out and no float32 residual");
  path = resolve(path);
  Problem p{ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, nullptr, n, false, src_for(path)};
  p.ep = &epilogue;
  p.epilogue = packed_kernels().epilogue;
  run_product(p, engine_for(path), parallel);
}

void packed_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                      float* c, int64_t ldc, bool parallel, Bf16Path path) {
  path = resolve(path);
  run_product(Problem{ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, false, src_for(path)},
              engine_for(path), parallel);
}

Bf16Path bf16_path() {
  // cpu_amx(), with the tests' emulation standing in for usable tiles.
  if (cpu_isa() == CpuIsa::kAvx512 && cpu_amx_allowed() && (g_amx_as_auto.load() || detected_amx()))
    return Bf16Path::kAmx;
  return cpu_bf16_dot() ? Bf16Path::kDot : Bf16Path::kConvert;
}

std::string bf16_gemm_name() {
  switch (bf16_path()) {
    case Bf16Path::kAmx:
      return packed::kAmxBf16Kernels.name;
    case Bf16Path::kDot:
      return packed::kAvx512Bf16Kernels.name;
    default:
      return std::string("bf16-convert-") + packed_kernels().name;
  }
}

void set_amx_kernels_for_testing(const packed::Bf16DotKernelSet* kernels, bool as_auto) {
  g_amx_kernels.store(kernels);
  g_amx_as_auto.store(kernels != nullptr && as_auto);
}

}  // namespace gpipe::ops::cpu
