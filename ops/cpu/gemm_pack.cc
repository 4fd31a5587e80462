// The packed GEMM driver's packing (gemm_driver.h): op(A) into mr-row
// panels and op(B) into nr-column panels, through the active level's
// packers (gemm_kernels.h), and the prefetch of the next A panels' source.
// Shared by gemm_packed.cc and gemm_split.cc.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ops/cpu/gemm_driver.h"

namespace gpipe::ops::cpu {
namespace {

using namespace gemm_driver;
// The transposing and copying packers are the ISA's own (KernelSet).

void zero_lanes(int64_t from, int64_t stride, int64_t kc, float* dst) {
  if (from < stride)
    for (int64_t p = 0; p < kc; ++p)
      std::fill(dst + p * stride + from, dst + (p + 1) * stride, 0.0f);
}

// lanes x kc of a row-major source with row stride ld, as one panel of
// `stride` lanes: `along` = the panel's lanes run along the source's rows
// (element (r, p) at src[p * ld + r]), else across them (at src[r * ld + p]).
// `a`: an A panel (the dot kernels may lay those out differently).
void pack_panel(const Problem& P, const Engine& e, const void* src, int64_t ld, bool along, bool a,
                int64_t lanes, int64_t kc, int64_t stride, char* dst) {
  if (P.src == Src::kBf16Dot) {
    const auto* s = static_cast<const uint16_t*>(src);
    auto* d = reinterpret_cast<uint16_t*>(dst);
    const auto pack = along ? (a ? e.dot->pack_a_cols : e.dot->pack_cols)
                            : (a ? e.dot->pack_a_rows : e.dot->pack_rows);
    return pack(s, ld, lanes, kc, d, stride);
  }
  auto* d = reinterpret_cast<float*>(dst);
  if (P.src == Src::kBf16Convert) {
    const auto* s = static_cast<const uint16_t*>(src);
    if (along) return e.ks->pack_copy_bf16(s, ld, lanes, kc, d, stride);
    e.ks->pack_transposed_bf16(s, ld, lanes, kc, d, stride);
  } else {
    const auto* s = static_cast<const float*>(src);
    if (along) return e.ks->pack_copy(s, ld, lanes, kc, d, stride);
    e.ks->pack_transposed(s, ld, lanes, kc, d, stride);
  }
  zero_lanes(lanes, stride, kc, d);
}

// The element at (row, col) of a row-major operand of element size `es`.
const void* at(const void* base, int64_t row, int64_t col, int64_t ld, int64_t es) {
  return static_cast<const char*>(base) + (row * ld + col) * es;
}
int64_t src_size(const Problem& P) { return P.src == Src::kF32 ? 4 : 2; }

}  // namespace

namespace gemm_driver {

// Rows [i0, i0 + mr) of op(A), columns [p0, p0 + kc), as one mr panel.
void pack_a_panel(const Problem& P, const Engine& e, int64_t i0, int64_t p0, int64_t kc,
                  char* dst) {
  const int64_t rows = std::min<int64_t>(e.mr, P.m - i0), es = src_size(P);
  if (P.ta)
    return pack_panel(P, e, at(P.a, p0, i0, P.lda, es), P.lda, true, true, rows, kc, e.mr, dst);
  pack_panel(P, e, at(P.a, i0, p0, P.lda, es), P.lda, false, true, rows, kc, e.mr, dst);
}

// Rows [p0, p0 + kc) of op(B), columns [j0, j0 + nr), as one nr panel.
void pack_b_panel(const Problem& P, const Engine& e, int64_t j0, int64_t p0, int64_t kc,
                  char* dst) {
  const int64_t cols = std::min<int64_t>(e.nr, P.n - j0), es = src_size(P);
  if (!P.tb)
    return pack_panel(P, e, at(P.b, p0, j0, P.ldb, es), P.ldb, true, false, cols, kc, e.nr, dst);
  pack_panel(P, e, at(P.b, j0, p0, P.ldb, es), P.ldb, false, false, cols, kc, e.nr, dst);
}

// Note [Grouped transposed A]. For op(A) = A^T (a weight gradient's
// G^T X), an A panel is mr consecutive floats (56 bytes) of each of kc rows
// of A, and rows are often a power of two of bytes apart (1, 4 or 32 KB):
// every row of a panel falls in the same few sets of the L1 and L2 caches,
// the lines are evicted before the next panel reads their other half, and
// packing one panel at a time read each line twice, from L3. So the panels
// are packed a group at a time, in chunks of a few rows: each chunk's source
// lines are read whole, by the group's panels one after another, while they
// are in L1. (Not for AMX's row-major A panels, whose depth is not the
// panel's outer dimension: its transposing packer reads 16 rows of A per
// pass instead, Note [AMX panels] in gemm_amx.cc.)
constexpr int64_t kGroupPanels = 8;  // A panels packed together (8 x 14 floats = 7 lines a row)
constexpr int64_t kGroupRows = 8;    // rows of A per chunk (even: bfloat16 pairs stay whole)

int64_t a_panel_group(const Problem& P, const Engine& e) {
  return P.ta && (e.dot == nullptr || e.dot->k_align == 2) ? kGroupPanels : 1;
}

namespace {

// Note [Grouped float32 A^T]. For float32 operands the group's panels are
// packed row by row in one pass: row p of the source holds, side by side,
// depth p of every panel of the group (count * MR floats, 7 lines for 8
// panels of 14), so each source line is read once, whole, and goes to the
// panels' depth p at once. The per-panel packers, called for 8 rows at a
// time, cost a call and its prefetches per 24 or 56 bytes: `perf` put the
// packer at 12% of a warm 256x256x1024 weight gradient at the AVX2 level
// (6 x 16 tiles). `lanes`
// counts the valid columns; a short last panel's others are zero.
template <int MR>
void pack_a_group_f32(const float* src, int64_t ld, int64_t lanes, int64_t kc, int64_t count,
                      float* dst) {
  constexpr int64_t kAhead = 8;  // rows ahead fetched by hand: they are ld apart
  const int64_t width = std::min(lanes, count * MR);
  for (int64_t p = 0; p < kc; ++p) {
    const float* s = src + p * ld;
    if (p + kAhead < kc) {
      const char* ahead = reinterpret_cast<const char*>(s + kAhead * ld);
      for (int64_t off = 0; off < width * 4; off += 64) __builtin_prefetch(ahead + off, 0, 3);
      __builtin_prefetch(ahead + width * 4 - 4, 0, 3);
    }
    float* d = dst + p * MR;
    int64_t q = 0;
    for (; (q + 1) * MR <= width; ++q) std::memcpy(d + q * MR * kc, s + q * MR, MR * sizeof(float));
    if (q < count) {  // the short last panel
      const int64_t valid = width - q * MR;
      float* dq = d + q * MR * kc;
      std::memcpy(dq, s + q * MR, static_cast<size_t>(valid) * sizeof(float));
      std::fill(dq + valid, dq + MR, 0.0f);
    }
  }
}

// pack_a_group_f32 for the level's mr, or false where there is none.
bool pack_a_group(const Problem& P, const Engine& e, const Block& blk, int64_t ip, int64_t count) {
  if (P.src != Src::kF32 || e.ks == nullptr) return false;
  const int64_t i0 = blk.i0 + ip * e.mr, lanes = blk.i0 + blk.rows - i0;
  const auto* src = static_cast<const float*>(at(P.a, blk.p0, i0, P.lda, 4));
  auto* dst = reinterpret_cast<float*>(blk.a_panel(e, ip));
  switch (e.mr) {
    case 4:
      pack_a_group_f32<4>(src, P.lda, lanes, blk.kc, count, dst);
      return true;
    case 6:
      pack_a_group_f32<6>(src, P.lda, lanes, blk.kc, count, dst);
      return true;
    case 14:
      pack_a_group_f32<14>(src, P.lda, lanes, blk.kc, count, dst);
      return true;
    default:
      return false;
  }
}

}  // namespace

void pack_a_panels(const Problem& P, const Engine& e, const Block& blk, int64_t ip, int64_t count) {
  if (P.direct_a) return;  // Note [Direct A] in gemm_kernels.h
  if (a_panel_group(P, e) == 1 || count == 1) {
    for (int64_t q = ip; q < ip + count; ++q)
      pack_a_panel(P, e, blk.i0 + q * e.mr, blk.p0, blk.kc, blk.a_panel(e, q));
    return;
  }
  if (pack_a_group(P, e, blk, ip, count)) return;
  for (int64_t p = 0; p < blk.kc; p += kGroupRows) {
    const int64_t rows = std::min(kGroupRows, blk.kc - p);
    for (int64_t q = ip; q < ip + count; ++q)  // depth p of a panel: p * mr elements in
      pack_a_panel(P, e, blk.i0 + q * e.mr, blk.p0 + p, rows,
                   blk.a_panel(e, q) + p * e.mr * e.esize);
  }
}

// Note [Prefetched A sources]. A block's A panels are packed as the thread
// reaches them, and in a training step their source (an activation or its
// gradient, 1-4 MB) is seldom still in the caches: each pack then waits on
// memory while the FMA units idle. So while the tiles of one group of A
// panels run, the source of the next group is prefetched into L2, a slice
// per tile (the lines of rows lines * part / parts on). Cold operands
// (a 64 MB sweep between products), Zen 4, three alternating runs: the
// 134-MFLOP products of W2's attention projections 2-5% faster at both
// levels, larger ones unchanged.
// On a 2-core Intel Xeon (Sapphire Rapids class, 2 MB L2) it did not pay:
// `perf` put the prefetch loop at 3% of W2's one-thread step (a slice is
// 28-64 prefetches issued back to back before a tile, more than the L1's
// fill buffers hold, so the core stalls on them), and W2's step without it
// was 0-8% faster at two threads in 5 of 5 alternating pairs, level at one
// thread and under bf16; isolated cold products were mixed (the smallest
// weight gradient 2-5% slower, others either way). So it is off by default
// on Intel CPUs and on elsewhere; GPIPE_GEMM_PREFETCH_A=0|1 chooses, and
// gpipe_bench's compute line says which. A hint: no bits change.
void prefetch_a_panels(const Problem& P, const Engine& e, const Block& blk, int64_t ip,
                       int64_t count, int64_t part, int64_t parts) {
  if (!P.prefetch_a) return;
  const int64_t es = src_size(P), i0 = blk.i0 + ip * e.mr;
  const int64_t rows = std::min(count * e.mr, blk.i0 + blk.rows - i0);
  if (rows <= 0) return;
  const bool ta = P.ta;
  const int64_t lines = ta ? blk.kc : rows, bytes = (ta ? rows : blk.kc) * es;
  const char* base = static_cast<const char*>(ta ? at(P.a, blk.p0, i0, P.lda, es)
                                                 : at(P.a, i0, blk.p0, P.lda, es));
  const int64_t lo = lines * part / parts, hi = lines * (part + 1) / parts;
  for (int64_t r = lo; r < hi; ++r) {
    const char* row = base + r * P.lda * es;
    const uintptr_t first = reinterpret_cast<uintptr_t>(row) & ~uintptr_t{63};
    const uintptr_t last = reinterpret_cast<uintptr_t>(row + bytes - 1);
    for (uintptr_t q = first; q <= last; q += 64)
      __builtin_prefetch(reinterpret_cast<const char*>(q), 0, 2);
  }
}

}  // namespace gemm_driver
}  // namespace gpipe::ops::cpu
