// Packed fp32 GEMM driver (Goto/BLIS blocking, row-major form).
//
// C is cut into blocks of mc rows; k into slices of kc; n into chunks of at
// most kNChunk columns. For each (rows, columns, k-slice) block, op(A) is
// packed into mr-row panels (p-major: a[p * mr + i]) and op(B) into nr-column
// panels (b[p * nr + j]), zero-padded to full tiles, and every mr x nr tile
// of C gets one micro-kernel call. Inside a block the loop runs over A
// panels, and for each over the nc columns of B that fit in L2, so one A panel
// (mr x kc) stays in L1 while the B block streams from L2.
//
// Note [Shared B panels]. By default the pool's threads split the A
// panels (rows of C) and share one packed B block: whichever thread first
// reaches a B panel claims it with an atomic flag and packs it; the others
// pack the remaining panels meanwhile and wait only for panels in flight. So
// one parallel_for per block suffices, and a pool that runs the chunks one
// after another on the caller (it is busy, or we are inside a pool task) still
// works: nobody waits for a panel nobody packs. When op(A) has too few panels
// to share out evenly (m small) the threads split the B panels instead, and A
// is packed once up front.
//
// Buffers are thread-local to the calling thread, 64-byte aligned, and grow
// only: no allocation per call in the steady state.
#include "ops/cpu/gemm_packed.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <thread>

#include "core/cpu_isa.h"
#include "core/parallel.h"

namespace gpipe::ops::cpu {
namespace {

using packed::KernelSet;

constexpr int64_t kNChunk = 8192;  // columns of op(B) packed at once (B buffer <= kc * kNChunk)
constexpr double kParallelFlops = 4e6;  // below this a product runs on the caller
constexpr int kMaxTile = 14 * 32;       // largest mr * nr of any kernel set

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Problem {
  bool ta, tb;
  int64_t m, n, k;
  float alpha;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float beta;
  float* c;
  int64_t ldc;
  bool ct = false;  // C stored transposed: element (i, j) of this product lives at c[j * ldc + i]
};

// One (rows, columns, k-slice) block of the product.
struct Block {
  int64_t i0, rows, j0, cols, p0, kc;
  float beta;  // beta for the first k-slice, 1 afterwards
  int64_t a_panels, b_panels;
  float* pa;  // a_panels * mr * kc
  float* pb;  // b_panels * nr * kc
};

class AlignedFloats {
 public:
  float* get(int64_t count) {
    if (count > size_) {
      ptr_.reset(static_cast<float*>(::operator new(count * sizeof(float), std::align_val_t(64))));
      size_ = count;
    }
    return ptr_.get();
  }

 private:
  struct Free {
    void operator()(float* p) const { ::operator delete(p, std::align_val_t(64)); }
  };
  std::unique_ptr<float, Free> ptr_;
  int64_t size_ = 0;
};

struct Workspace {
  AlignedFloats a, b;
  std::unique_ptr<std::atomic<uint8_t>[]>
      b_state;  // Note [Shared B panels]: 0 free, 1 packing, 2 ready
  int64_t b_state_size = 0;

  std::atomic<uint8_t>* states(int64_t count) {
    if (count > b_state_size) {
      b_state.reset(new std::atomic<uint8_t>[count]);
      b_state_size = count;
    }
    for (int64_t i = 0; i < count; ++i) b_state[i].store(0, std::memory_order_relaxed);
    return b_state.get();
  }
};

// ---- packing ---------------------------------------------------------------

// The transposing and copying packers are the ISA's own (KernelSet).

void zero_lanes(int64_t from, int64_t stride, int64_t kc, float* dst) {
  if (from < stride)
    for (int64_t p = 0; p < kc; ++p)
      std::fill(dst + p * stride + from, dst + (p + 1) * stride, 0.0f);
}

// Rows [i0, i0 + mr) of op(A), columns [p0, p0 + kc), as one mr panel.
void pack_a_panel(const Problem& P, const KernelSet& ks, int64_t i0, int64_t p0, int64_t kc,
                  float* dst) {
  const int64_t rows = std::min<int64_t>(ks.mr, P.m - i0);
  if (P.ta) return ks.pack_copy(P.a + p0 * P.lda + i0, P.lda, rows, kc, dst, ks.mr);
  ks.pack_transposed(P.a + i0 * P.lda + p0, P.lda, rows, kc, dst, ks.mr);
  zero_lanes(rows, ks.mr, kc, dst);
}

// Rows [p0, p0 + kc) of op(B), columns [j0, j0 + nr), as one nr panel.
void pack_b_panel(const Problem& P, const KernelSet& ks, int64_t j0, int64_t p0, int64_t kc,
                  float* dst) {
  const int64_t cols = std::min<int64_t>(ks.nr, P.n - j0);
  if (!P.tb) return ks.pack_copy(P.b + p0 * P.ldb + j0, P.ldb, cols, kc, dst, ks.nr);
  ks.pack_transposed(P.b + j0 * P.ldb + p0, P.ldb, cols, kc, dst, ks.nr);
  zero_lanes(cols, ks.nr, kc, dst);
}

// ---- tiles -----------------------------------------------------------------

void run_tile(const Problem& P, const KernelSet& ks, const Block& blk, int64_t ip, int64_t jp) {
  const int mr = ks.mr, nr = ks.nr;
  const float* pa = blk.pa + ip * mr * blk.kc;
  const float* pb = blk.pb + jp * nr * blk.kc;
  const int64_t i = blk.i0 + ip * mr, j = blk.j0 + jp * nr;
  const int64_t rows = std::min<int64_t>(mr, blk.i0 + blk.rows - i);
  const int64_t cols = std::min<int64_t>(nr, blk.j0 + blk.cols - j);
  alignas(64) float tile[kMaxTile];
  if (P.ct) {  // Note [Transposed small products]: the tile goes to C through a transpose
    ks.kernel(blk.kc, pa, pb, tile, nr, P.alpha, 0.0f);
    for (int64_t q = 0; q < cols; ++q) {
      float* cq = P.c + (j + q) * P.ldc + i;
      if (blk.beta == 0.0f)
        for (int64_t r = 0; r < rows; ++r) cq[r] = tile[r * nr + q];
      else
        for (int64_t r = 0; r < rows; ++r) cq[r] = tile[r * nr + q] + blk.beta * cq[r];
    }
    return;
  }
  float* c = P.c + i * P.ldc + j;
  if (rows == mr && cols == nr) {
    ks.kernel(blk.kc, pa, pb, c, P.ldc, P.alpha, blk.beta);
    return;
  }
  ks.kernel(blk.kc, pa, pb, tile, nr, P.alpha, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float* cr = c + r * P.ldc;
    const float* tr = tile + r * nr;
    if (blk.beta == 0.0f)
      for (int64_t q = 0; q < cols; ++q) cr[q] = tr[q];
    else
      for (int64_t q = 0; q < cols; ++q) cr[q] = tr[q] + blk.beta * cr[q];
  }
}

// ---- one block, split over the pool ---------------------------------------

// Waits for another thread to finish packing a B panel (microseconds); yields
// after a while in case that thread lost its core.
void wait_ready(const std::atomic<uint8_t>& state) {
  for (int spins = 0; state.load(std::memory_order_acquire) != 2; ++spins) {
    if (spins < 4096)
      __builtin_ia32_pause();
    else
      std::this_thread::yield();
  }
}

// Rows of C split: A panels [lo, hi) on this task, B panels shared.
void run_block_split_rows(const Problem& P, const KernelSet& ks, const Block& blk,
                          std::atomic<uint8_t>* b_state, int64_t lo, int64_t hi) {
  const int64_t nc_panels = std::max<int64_t>(1, ks.nc / ks.nr);
  for (int64_t jc = 0; jc < blk.b_panels; jc += nc_panels) {
    const int64_t jend = std::min(blk.b_panels, jc + nc_panels);
    for (int64_t jp = jc; jp < jend; ++jp) {
      uint8_t expected = 0;
      if (b_state[jp].load(std::memory_order_relaxed) == 0 &&
          b_state[jp].compare_exchange_strong(expected, 1, std::memory_order_acquire)) {
        pack_b_panel(P, ks, blk.j0 + jp * ks.nr, blk.p0, blk.kc, blk.pb + jp * ks.nr * blk.kc);
        b_state[jp].store(2, std::memory_order_release);
      }
    }
    for (int64_t jp = jc; jp < jend; ++jp) wait_ready(b_state[jp]);
    for (int64_t ip = lo; ip < hi; ++ip) {
      if (jc == 0)
        pack_a_panel(P, ks, blk.i0 + ip * ks.mr, blk.p0, blk.kc, blk.pa + ip * ks.mr * blk.kc);
      for (int64_t jp = jc; jp < jend; ++jp) run_tile(P, ks, blk, ip, jp);
    }
  }
}

// Columns of C split: B panels [lo, hi) on this task, A packed beforehand.
void run_block_split_cols(const Problem& P, const KernelSet& ks, const Block& blk, int64_t lo,
                          int64_t hi) {
  const int64_t nc_panels = std::max<int64_t>(1, ks.nc / ks.nr);
  for (int64_t jc = lo; jc < hi; jc += nc_panels) {
    const int64_t jend = std::min(hi, jc + nc_panels);
    for (int64_t jp = jc; jp < jend; ++jp)
      pack_b_panel(P, ks, blk.j0 + jp * ks.nr, blk.p0, blk.kc, blk.pb + jp * ks.nr * blk.kc);
    for (int64_t ip = 0; ip < blk.a_panels; ++ip)
      for (int64_t jp = jc; jp < jend; ++jp) run_tile(P, ks, blk, ip, jp);
  }
}

// Fraction of `threads` busy when `panels` are dealt out in equal chunks.
double balance(int64_t panels, int threads) {
  return static_cast<double>(panels) / (threads * ceil_div(panels, threads));
}

void run_block(const Problem& P, const KernelSet& ks, const Block& blk, Workspace& ws,
               int threads) {
  if (threads > 1 &&
      balance(blk.a_panels, threads) < std::min(0.9, balance(blk.b_panels, threads))) {
    for (int64_t ip = 0; ip < blk.a_panels; ++ip)
      pack_a_panel(P, ks, blk.i0 + ip * ks.mr, blk.p0, blk.kc, blk.pa + ip * ks.mr * blk.kc);
    parallel_for(0, blk.b_panels, 1,
                 [&](int64_t lo, int64_t hi) { run_block_split_cols(P, ks, blk, lo, hi); });
    return;
  }
  std::atomic<uint8_t>* b_state = ws.states(blk.b_panels);
  if (threads <= 1) {
    run_block_split_rows(P, ks, blk, b_state, 0, blk.a_panels);
    return;
  }
  parallel_for(0, blk.a_panels, 1,
               [&](int64_t lo, int64_t hi) { run_block_split_rows(P, ks, blk, b_state, lo, hi); });
}

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

void packed_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                  bool parallel) {
  Problem P{ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == 0.0f) {
    scale_c(P);
    return;
  }
  const KernelSet& ks = packed_kernels();
  // Note [Transposed small products]. A product with few rows or columns
  // (a convolution's 8 output channels, a 4-column im2col block) fills the
  // mr x nr tiles badly in one orientation. C^T = op(B)^T op(A)^T swaps the
  // roles of m and n; when that pads far less, the transposed product is
  // computed and its tiles are written into C through a transpose.
  const auto padded = [&](int64_t rows, int64_t cols) {
    return static_cast<double>(ceil_div(rows, ks.mr) * ks.mr) *
           static_cast<double>(ceil_div(cols, ks.nr) * ks.nr);
  };
  if (padded(n, m) < 0.8 * padded(m, n)) {
    P = Problem{!tb, !ta, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc, /*ct=*/true};
    m = P.m;
    n = P.n;
  }
  const int threads = parallel && 2.0 * m * n * k >= kParallelFlops ? intra_op_threads() : 1;

  // Even splits: no thin last block.
  const int64_t k_slices = ceil_div(k, ks.kc), kc_max = ceil_div(k, k_slices);
  const int64_t m_blocks = ceil_div(m, ks.mc),
                mc_max = ceil_div(ceil_div(m, m_blocks), ks.mr) * ks.mr;
  const int64_t n_chunks = ceil_div(n, kNChunk),
                nc_max = ceil_div(ceil_div(n, n_chunks), ks.nr) * ks.nr;

  static thread_local Workspace ws;
  float* pa = ws.a.get(mc_max * kc_max);
  float* pb = ws.b.get(nc_max * kc_max);
  for (int64_t i0 = 0; i0 < m; i0 += mc_max) {
    for (int64_t j0 = 0; j0 < n; j0 += nc_max) {
      for (int64_t p0 = 0; p0 < k; p0 += kc_max) {
        Block blk;
        blk.i0 = i0;
        blk.rows = std::min(mc_max, m - i0);
        blk.j0 = j0;
        blk.cols = std::min(nc_max, n - j0);
        blk.p0 = p0;
        blk.kc = std::min(kc_max, k - p0);
        blk.beta = p0 == 0 ? beta : 1.0f;
        blk.a_panels = ceil_div(blk.rows, ks.mr);
        blk.b_panels = ceil_div(blk.cols, ks.nr);
        blk.pa = pa;
        blk.pb = pb;
        run_block(P, ks, blk, ws, threads);
      }
    }
  }
}

}  // namespace gpipe::ops::cpu
