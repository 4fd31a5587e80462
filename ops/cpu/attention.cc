// Fused attention CPU kernels.
//
// Note [Fused attention]. The composed form (ops::attention_composed) makes a
// permuted copy of q, k and v per head layout, a scores tensor, two masked
// copies of it, the softmax, and a permuted copy of the result — and as many
// again in backward. Here each task owns one (example, head) pair and reads
// and writes the heads in place in the [B, T, D] layout (GEMMs with leading
// dimension D): scores = q_h k_h^T into the saved probabilities buffer,
// scaled, masked (causal j > i and padded keys replaced by -1e9, as
// masked_fill does) and soft-maxed in place, then out_h = P v_h. Backward,
// per pair: dv_h = P^T dout_h; dP = dout_h v_h^T; dS = P * (dP - rowsum(dP * P)),
// zero where masked (masked_fill passes no gradient), times the scale;
// dq_h = dS k_h; dk_h = dS^T q_h. Pairs write disjoint slices, so the result
// does not depend on the thread count.
//
// Note [Small attention products]. A pair's products are tiny (W2: 32 x 32
// x 64), and a general GEMM spends more on packing and blocking them than on
// their FMAs. In float32, where the vector unit has FMA (AVX2, AVX-512) and
// a product's output width n is a whole number of vectors, at most eight,
// C = op(A) B runs as register tiles of R rows by all n columns straight
// from the operands: B's rows are loaded as vectors and op(A)'s elements
// broadcast (ta: A holds op(A) transposed, as P^T and dS^T do). The two
// products with a transposed right operand (q k^T, dout v^T) transpose it
// (at most 8 vectors by dh) into scratch first. Each element is one FMA
// chain over k in order, so results differ from the GEMM's blocked sums by
// round-off only, and no pair's result depends on the thread count.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "ops/attention_kernels.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

constexpr double kMasked = -1e9;

template <class T>
using Row = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;

struct Dims {
  int64_t b, tq, tk, d, heads, dh;
  Dims(const Tensor& q, const Tensor& k, int64_t h)
      : b(q.size(0)), tq(q.size(1)), tk(k.size(1)), d(q.size(2)), heads(h), dh(q.size(2) / h) {}
  int64_t q_at(int64_t bh) const { return (bh / heads) * tq * d + (bh % heads) * dh; }
  int64_t k_at(int64_t bh) const { return (bh / heads) * tk * d + (bh % heads) * dh; }
};

// Note [Banded products]. Where the masks leave each score row a visible
// prefix (causal, and padding only at the end: visible_keys > 0), the
// probabilities P and their gradient dS (Tq x Tk) are exactly zero from
// column row_end(i) on, and key j is seen only by the rows from
// first_row(j) on. The register tiles skip those zeros: the products that
// sum over the keys (out = P v, dq = dS k) stop each tile at its last row's
// row_end, and those that sum over the queries (dv = P^T dout, dk = dS^T q)
// start each tile at its first key's first_row. The terms left out are
// exact zeros, so the results are the same (up to the sign of a zero) and a
// causal pair's four such products do about half their work.
struct Band {
  int64_t visible, tq;
  bool causal;
  int64_t row_end(int64_t i) const { return causal ? std::min(i + 1, visible) : visible; }
  int64_t first_row(int64_t j) const { return j >= visible ? tq : (causal ? j : 0); }
};

#if defined(__AVX2__) && defined(__FMA__)
#include "ops/cpu/transpose8_avx.inc"
#endif

#if defined(__AVX512F__)
using Vec = __m512;
constexpr int kLanes = 16, kRegisters = 32;
inline Vec vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec vbroadcast(float x) { return _mm512_set1_ps(x); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec vzero() { return _mm512_setzero_ps(); }
#elif defined(__AVX2__) && defined(__FMA__)
using Vec = __m256;
constexpr int kLanes = 8, kRegisters = 16;
inline Vec vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec vbroadcast(float x) { return _mm256_set1_ps(x); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec vzero() { return _mm256_setzero_ps(); }
#endif  // other levels: no tiles, every product goes to cpu::gemm

#if defined(__AVX2__) && defined(__FMA__)
constexpr int kMaxVectors = 8;  // widest output row the tiles take, in vectors

bool tiles_apply(int64_t n) { return n > 0 && n % kLanes == 0 && n / kLanes <= kMaxVectors; }

// Note [Column chunks]. A tile holds R rows of NV vectors, and each step
// of its sum loads NV vectors of B and R broadcasts for R * NV FMAs. With
// 16 registers (AVX2) a 64-wide head is 8 vectors a row, which leaves room
// for one-row tiles: 9 loads per 8 FMAs. So outputs are cut into column
// chunks of at most kChunkVectors vectors, each run as its own tiles: two
// at AVX2 (6-row tiles, 8 loads per 12 FMAs), four at AVX-512 (32
// registers: 6 rows, 10 loads per 24 FMAs). Each element is still one FMA
// chain over k, so the bits do not change. W2's attention (heads of 64, 32
// keys) at AVX2, kernel lab, 1 thread, Zen 4: 1.57-1.61 -> 1.32-1.39 ms
// causal, 1.80-1.99 -> 1.48-1.53 ms not.
constexpr int kChunkVectors = kRegisters / 8;

// Rows of C per tile for NV vectors a row: the accumulators, one row of B and
// a broadcast fit in the registers.
template <int NV>
constexpr int tile_rows() {
  return std::max(1, std::min(8, (kRegisters - 2) / NV - 1));
}

// C[0, R) x [0, NV * kLanes) = op(A) B over k (Note [Small attention products]).
template <bool TA, int R, int NV>
void tile(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
          int64_t ldc) {
  // Fully unrolled, so the accumulators live in registers throughout.
  Vec acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[r][v] = vzero();
  for (int64_t p = 0; p < k; ++p) {
    Vec row[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) row[v] = vload(b + p * ldb + v * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const Vec x = vbroadcast(TA ? a[p * lda + r] : a[r * lda + p]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = vfma(x, row[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) vstore(c + r * ldc + v * kLanes, acc[r][v]);
}

// The last m % R rows as one tile of that many rows.
template <bool TA, int NV, int... Rs>
void tail_tile([[maybe_unused]] int rows, [[maybe_unused]] int64_t k,
               [[maybe_unused]] const float* a, [[maybe_unused]] int64_t lda,
               [[maybe_unused]] const float* b, [[maybe_unused]] int64_t ldb,
               [[maybe_unused]] float* c, [[maybe_unused]] int64_t ldc,
               std::integer_sequence<int, Rs...>) {  // Rs empty where R = 1
  (void)((rows == Rs + 1 && (tile<TA, Rs + 1, NV>(k, a, lda, b, ldb, c, ldc), true)) || ...);
}

template <bool TA, int NV>
void tiles(int64_t m, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
           int64_t ldc, const Band* band) {
  constexpr int R = tile_rows<NV>();
  // Each tile's k range: op(A)'s nonzero columns for its rows (Note [Banded
  // products]); the whole of k without a band.
  const auto run = [&](auto rows_c, int64_t i, int rows) {
    int64_t lo = 0, hi = k;
    if (band) {
      if (TA)
        lo = std::min(k, band->first_row(i));
      else
        hi = std::min(k, band->row_end(i + rows - 1));
    }
    const float* ai = (TA ? a + i : a + i * lda) + (TA ? lo * lda : 0);
    const float* bi = b + lo * ldb;
    float* ci = c + i * ldc;
    if constexpr (decltype(rows_c)::value > 0)
      tile<TA, decltype(rows_c)::value, NV>(hi - lo, ai, lda, bi, ldb, ci, ldc);
    else
      tail_tile<TA, NV>(rows, hi - lo, ai, lda, bi, ldb, ci, ldc,
                        std::make_integer_sequence<int, R - 1>{});
  };
  int64_t i = 0;
  for (; i + R <= m; i += R) run(std::integral_constant<int, R>{}, i, R);
  if (i < m) run(std::integral_constant<int, 0>{}, i, static_cast<int>(m - i));
}

template <bool TA>
void tiles_for(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, float* c, int64_t ldc, const Band* band) {
  using Fn = void (*)(int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*,
                      int64_t, const Band*);
  static constexpr Fn kFns[kMaxVectors] = {tiles<TA, 1>, tiles<TA, 2>, tiles<TA, 3>, tiles<TA, 4>,
                                           tiles<TA, 5>, tiles<TA, 6>, tiles<TA, 7>, tiles<TA, 8>};
  // tiles_apply: 1 <= n / kLanes <= 8; Note [Column chunks]
  const int64_t chunk = kChunkVectors * kLanes;
  for (int64_t j = 0; j < n; j += chunk)
    kFns[std::min(chunk, n - j) / kLanes - 1](m, k, a, lda, b + j, ldb, c + j, ldc, band);
}
#endif

// C [m, n] = op(A) [m, k] B [k, n], B row-major with row stride ldb (ta: A
// holds op(A)^T, [k, m]): tiles where they apply, else cpu::gemm. With a
// band, A (not op(A)) is a Tq x Tk operand zero outside it, and the tiles
// skip those zeros (Note [Banded products]).
template <class T>
void product(bool ta, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
             int64_t ldb, T* c, int64_t ldc, const Band* band = nullptr) {
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (std::is_same_v<T, float>) {
    if (tiles_apply(n) && m > 0 && k > 0) {
      if (ta) return tiles_for<true>(m, n, k, a, lda, b, ldb, c, ldc, band);
      return tiles_for<false>(m, n, k, a, lda, b, ldb, c, ldc, band);
    }
  }
#endif
  (void)band;
  cpu::gemm<T>(ta, false, m, n, k, T(1), a, lda, b, ldb, T(0), c, ldc);
}

// C [m, n] = A [m, k] B^T, B [n, k] row-major: B^T made in `scratch` for the
// tiles where they apply, else cpu::gemm on B as it is.
template <class T>
void product_bt(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
                T* c, int64_t ldc, vector<T>& scratch) {
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (std::is_same_v<T, float>) {
    if (tiles_apply(n) && m > 0 && k > 0) {  // n is a multiple of 8: whole 8 x 8 blocks in j
      scratch.resize(static_cast<size_t>(k * n));
      float* bt = scratch.data();
      for (int64_t j = 0; j < n; j += 8) {
        int64_t p = 0;
        for (; p + 8 <= k; p += 8) {
          __m256 v[8];
          for (int i = 0; i < 8; ++i) v[i] = _mm256_loadu_ps(b + (j + i) * ldb + p);
          transpose8(v);
          for (int i = 0; i < 8; ++i) _mm256_storeu_ps(bt + (p + i) * n + j, v[i]);
        }
        for (; p < k; ++p)
          for (int64_t i = 0; i < 8; ++i) bt[p * n + j + i] = b[(j + i) * ldb + p];
      }
      return product<T>(false, m, n, k, a, lda, bt, n, c, ldc);
    }
  }
#endif
  cpu::gemm<T>(false, true, m, n, k, T(1), a, lda, b, ldb, T(0), c, ldc);
}

// Keys [0, n) visible and the rest padded (no mask, or padding only at the
// end, as batches of sequences padded to one length have): n, which
// softmax_prefix and the backward's prefix form take without a mask test
// per element. -1 when the padding is not a suffix or hides every key: the
// masked form.
template <class T>
int64_t visible_keys(const T* pad, int64_t tk) {
  if (!pad) return tk;
  int64_t n = 0;
  while (n < tk && pad[n] == T(0)) ++n;
  for (int64_t j = n; j < tk; ++j)
    if (pad[j] == T(0)) return -1;
  return n > 0 ? n : -1;
}

template <class T>
bool masked(const T* pad, bool causal, int64_t i, int64_t j) {
  return (causal && j > i) || (pad != nullptr && pad[j] != T(0));
}

// A score row whose first n keys are visible and the rest masked (no padding
// mask): softmax(scale * row[0, n)) there and exact zeros after, as the
// masked form computes it, without a mask test per element (n == 0 only
// when there are no keys at all).
// The exponentials run over whole vectors (up to tk): the masked tail
// [n, w) is set far below the max first and zeroed after, so no element
// takes the scalar exp of a vector loop's remainder.
template <class T>
void softmax_prefix(T* row, int64_t n, int64_t tk, T scale) {
  if (n == 0) return;
  Row<T> r(row, n);
  r *= scale;
  const T mx = r.maxCoeff();
  constexpr int64_t kPacket = Eigen::internal::packet_traits<T>::size;
  const int64_t w = std::min(tk, (n + kPacket - 1) / kPacket * kPacket);
  std::fill(row + n, row + w, T(kMasked));
  Row<T> rw(row, w);
  rw = (rw - mx).exp();
  std::fill(row + n, row + tk, T(0));
  r *= T(1) / r.sum();
}

// Note [Prefetched pairs]. In a training step a pair's operands (its head's
// dh columns of Tq or Tk rows, one D-wide row apart) are seldom in the caches,
// and the hardware prefetcher does not follow 256-byte pieces 1 KB apart: the
// kernel lab (operands hot) ran W2's attention in 1.4 ms, the step in 2.4.
// So each task fetches the next pair's operand rows into L2 while it works
// on this one: the forward q, k and v; the backward also the output
// gradient and the probabilities. W2, 1 thread, Zen 4, three alternating
// profiles: forward 6.5-7.2 -> 6.0-7.0 ms a step, backward 9.4-10.7 ->
// 8.8-9.0.
template <class S>
void prefetch_rows(const S* base, int64_t rows, int64_t cols, int64_t ld) {
  const int64_t bytes = cols * static_cast<int64_t>(sizeof(S));
  for (int64_t r = 0; r < rows; ++r) {
    const char* row = reinterpret_cast<const char*>(base + r * ld);
    const uintptr_t first = reinterpret_cast<uintptr_t>(row) & ~uintptr_t{63};
    const uintptr_t last = reinterpret_cast<uintptr_t>(row + bytes - 1);
    for (uintptr_t a = first; a <= last; a += 64)
      __builtin_prefetch(reinterpret_cast<const char*>(a), 0, 2);
  }
}

// One pair's operands and results: q, out, gout, gq rows of Tq (stride ldq),
// k, v, gk, gv rows of Tk (stride ldk), all dh wide; p the pair's Tq x Tk
// probabilities; pad its Tk key flags (or nullptr).
template <class T>
struct Pair {
  const T *q, *k, *v, *pad;
  int64_t ldq, ldk;
};

template <class T>
void forward_pair(const Dims& g, bool causal, T scale, const Pair<T>& in, T* p, T* out,
                  vector<T>& kt) {
  product_bt<T>(g.tq, g.tk, g.dh, in.q, in.ldq, in.k, in.ldk, p, g.tk, kt);
  const int64_t visible = visible_keys(in.pad, g.tk);
  const Band band{visible, g.tq, causal};
  for (int64_t i = 0; i < g.tq; ++i) {
    T* row = p + i * g.tk;
    if (visible > 0) {  // keys [0, n) are visible, the rest weigh exactly 0
      const int64_t n = causal ? std::min(i + 1, visible) : visible;
      softmax_prefix(row, n, g.tk, scale);
      continue;
    }
    for (int64_t j = 0; j < g.tk; ++j)
      row[j] = masked(in.pad, causal, i, j) ? T(kMasked) : row[j] * scale;
    Row<T> r(row, g.tk);
    const T mx = r.maxCoeff();
    r = (r - mx).exp();
    if (mx > T(kMasked))  // masked keys weigh exactly 0 (a vectorised exp leaves ~1e-39)
      for (int64_t j = 0; j < g.tk; ++j)
        if (masked(in.pad, causal, i, j)) row[j] = T(0);
    r *= T(1) / r.sum();
  }
  product<T>(false, g.tq, g.dh, g.tk, p, g.tk, in.v, in.ldk, out, in.ldq,
             visible > 0 ? &band : nullptr);
}

// sum_j a_j b_j over n, vectorised (in an order fixed by n).
template <class T>
T row_dot(const T* a, const T* b, int64_t n) {
  using C = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
  return (C(a, n) * C(b, n)).sum();
}

template <class T>
void backward_pair(const Dims& g, bool causal, T scale, const Pair<T>& in, const T* p, const T* go,
                   T* gq, T* gk, T* gv, vector<T>& ds, vector<T>& vt) {
  ds.resize(static_cast<size_t>(g.tq * g.tk));
  const int64_t visible = visible_keys(in.pad, g.tk);
  const Band band{visible, g.tq, causal};
  const Band* banded = visible > 0 ? &band : nullptr;  // Note [Banded products]
  product<T>(true, g.tk, g.dh, g.tq, p, g.tk, go, in.ldq, gv, in.ldk, banded);
  product_bt<T>(g.tq, g.tk, g.dh, go, in.ldq, in.v, in.ldk, ds.data(), g.tk, vt);
  for (int64_t i = 0; i < g.tq; ++i) {
    T* dr = ds.data() + i * g.tk;
    const T* pr = p + i * g.tk;
    if (visible > 0) {  // keys [0, n) visible: no mask test per element, p is 0 after
      const int64_t n = band.row_end(i);
      const T dot = row_dot(dr, pr, n);
      for (int64_t j = 0; j < n; ++j) dr[j] = pr[j] * (dr[j] - dot) * scale;
      std::fill(dr + n, dr + g.tk, T(0));
      continue;
    }
    const T dot = row_dot(dr, pr, g.tk);
    for (int64_t j = 0; j < g.tk; ++j)
      dr[j] = masked(in.pad, causal, i, j) ? T(0) : pr[j] * (dr[j] - dot) * scale;
  }
  product<T>(false, g.tq, g.dh, g.tk, ds.data(), g.tk, in.k, in.ldk, gq, in.ldq, banded);
  product<T>(true, g.tk, g.dh, g.tq, ds.data(), g.tk, in.q, in.ldq, gk, in.ldk, banded);
}

// Note [bfloat16 attention]. bfloat16 q, k, v (and probabilities, output
// and gradients) are widened a pair at a time into float32 scratch of dh
// columns, the float32 pair runs on it (with its register tiles), and each
// result is rounded once into place: what the float32 kernel computes on
// widened copies of the whole tensors (Note [16-bit kernels] in
// ops/dispatch.h), without those copies and their passes over memory.
// rows x cols of a 16-bit source of row stride ld, widened into buf (row
// stride cols); and back, each value rounded once.
template <class S>
const float* widen_block(const S* src, int64_t rows, int64_t cols, int64_t ld, vector<float>& buf) {
  buf.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) buf[r * cols + c] = load_float(src + r * ld, c);
  return buf.data();
}
template <class S>
void narrow_block(const vector<float>& src, int64_t rows, int64_t cols, S* dst, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) narrow_row(src.data() + r * cols, dst + r * ld, cols);
}
float* sized(vector<float>& buf, int64_t n) {
  buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// The pair's float32 scratch for a 16-bit S: operands, then results.
struct Scratch16 {
  vector<float> q, k, v, keys, p, go, out, gq, gk, gv;
  template <class S>
  Pair<float> widen(const Dims& g, const S* pq, const S* pk, const S* pv, const S* pad) {
    return Pair<float>{widen_block(pq, g.tq, g.dh, g.d, q),
                       widen_block(pk, g.tk, g.dh, g.d, k),
                       widen_block(pv, g.tk, g.dh, g.d, v),
                       pad ? widen_block(pad, 1, g.tk, 0, keys) : nullptr,
                       g.dh,
                       g.dh};
  }
};

template <class S>
void forward_impl(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad_t,
                  int64_t heads, bool causal, Tensor& out_t, Tensor& probs_t) {
  using T = compute_t<S>;
  const Dims g(q, k, heads);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(g.dh)));
  const S *pq = q.data<S>(), *pk = k.data<S>(), *pv = v.data<S>();
  const S* pad = pad_t.defined() ? pad_t.data<S>() : nullptr;
  S* out = out_t.data<S>();
  S* probs = probs_t.data<S>();
  parallel_for(0, g.b * heads, 1, [&](int64_t lo, int64_t hi) {
    vector<T> kt;
    Scratch16 sc;
    for (int64_t bh = lo; bh < hi; ++bh) {
      if (bh + 1 < hi) {  // Note [Prefetched pairs]
        prefetch_rows(pq + g.q_at(bh + 1), g.tq, g.dh, g.d);
        prefetch_rows(pk + g.k_at(bh + 1), g.tk, g.dh, g.d);
        prefetch_rows(pv + g.k_at(bh + 1), g.tk, g.dh, g.d);
      }
      const S* pad_b = pad ? pad + (bh / heads) * g.tk : nullptr;
      S* p = probs + bh * g.tq * g.tk;
      if constexpr (is_16bit_v<S>) {  // Note [bfloat16 attention]
        const Pair<float> in =
            sc.widen(g, pq + g.q_at(bh), pk + g.k_at(bh), pv + g.k_at(bh), pad_b);
        forward_pair<float>(g, causal, scale, in, sized(sc.p, g.tq * g.tk),
                            sized(sc.out, g.tq * g.dh), kt);
        narrow_block(sc.p, 1, g.tq * g.tk, p, 0);
        narrow_block(sc.out, g.tq, g.dh, out + g.q_at(bh), g.d);
      } else {
        const Pair<T> in{pq + g.q_at(bh), pk + g.k_at(bh), pv + g.k_at(bh), pad_b, g.d, g.d};
        forward_pair<T>(g, causal, scale, in, p, out + g.q_at(bh), kt);
      }
    }
  });
}

template <class S>
void backward_impl(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad_t,
                   const Tensor& probs_t, const Tensor& gout_t, int64_t heads, bool causal,
                   Tensor& gq_t, Tensor& gk_t, Tensor& gv_t) {
  using T = compute_t<S>;
  const Dims g(q, k, heads);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(g.dh)));
  const S *pq = q.data<S>(), *pk = k.data<S>(), *pv = v.data<S>(), *probs = probs_t.data<S>();
  const S* gout = gout_t.data<S>();
  const S* pad = pad_t.defined() ? pad_t.data<S>() : nullptr;
  S *gq = gq_t.data<S>(), *gk = gk_t.data<S>(), *gv = gv_t.data<S>();
  parallel_for(0, g.b * heads, 1, [&](int64_t lo, int64_t hi) {
    vector<T> ds, vt;
    Scratch16 sc;
    for (int64_t bh = lo; bh < hi; ++bh) {
      if (bh + 1 < hi) {  // Note [Prefetched pairs]
        prefetch_rows(pq + g.q_at(bh + 1), g.tq, g.dh, g.d);
        prefetch_rows(pk + g.k_at(bh + 1), g.tk, g.dh, g.d);
        prefetch_rows(pv + g.k_at(bh + 1), g.tk, g.dh, g.d);
        prefetch_rows(gout + g.q_at(bh + 1), g.tq, g.dh, g.d);
        prefetch_rows(probs + (bh + 1) * g.tq * g.tk, 1, g.tq * g.tk, 0);
      }
      const S* p = probs + bh * g.tq * g.tk;
      const S* pad_b = pad ? pad + (bh / heads) * g.tk : nullptr;
      if constexpr (is_16bit_v<S>) {  // Note [bfloat16 attention]
        const Pair<float> in =
            sc.widen(g, pq + g.q_at(bh), pk + g.k_at(bh), pv + g.k_at(bh), pad_b);
        backward_pair<float>(g, causal, scale, in, widen_block(p, 1, g.tq * g.tk, 0, sc.p),
                             widen_block(gout + g.q_at(bh), g.tq, g.dh, g.d, sc.go),
                             sized(sc.gq, g.tq * g.dh), sized(sc.gk, g.tk * g.dh),
                             sized(sc.gv, g.tk * g.dh), ds, vt);
        narrow_block(sc.gq, g.tq, g.dh, gq + g.q_at(bh), g.d);
        narrow_block(sc.gk, g.tk, g.dh, gk + g.k_at(bh), g.d);
        narrow_block(sc.gv, g.tk, g.dh, gv + g.k_at(bh), g.d);
      } else {
        const Pair<T> in{pq + g.q_at(bh), pk + g.k_at(bh), pv + g.k_at(bh), pad_b, g.d, g.d};
        backward_pair<T>(g, causal, scale, in, p, gout + g.q_at(bh), gq + g.q_at(bh),
                         gk + g.k_at(bh), gv + g.k_at(bh), ds, vt);
      }
    }
  });
}

void attention_forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad,
                           int64_t heads, bool causal, Tensor& out, Tensor& probs) {
  dispatch_floating_16(q.dtype(), "attention", [&](auto z) {
    forward_impl<decltype(z)>(q, k, v, pad, heads, causal, out, probs);
  });
}

void attention_backward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad,
                            const Tensor& probs, const Tensor& gout, int64_t heads, bool causal,
                            Tensor& gq, Tensor& gk, Tensor& gv) {
  dispatch_floating_16(q.dtype(), "attention backward", [&](auto z) {
    backward_impl<decltype(z)>(q, k, v, pad, probs, gout, heads, causal, gq, gk, gv);
  });
}

}  // namespace

GPIPE_ISA_KERNEL(attention_forward, attention_forward_cpu);
GPIPE_ISA_KERNEL(attention_backward, attention_backward_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
