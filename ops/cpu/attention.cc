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
// does not depend on the thread count. Dropout on the probabilities (Note
// [Attention dropout] in ops/attention.cc) is drawn row by row after the
// softmax (drop_row); out_h = P' v_h and dv_h = P'^T dout_h take the
// dropped P', and the saved probabilities carry the mask in their signs. The pair's products run on
// the register tiles of attention_tiles.inc (Note [Small attention products]).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "core/rng.h"
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

#include "ops/cpu/attention_tiles.inc"  // Note [Small attention products]

namespace rng {  // its kLanes is Philox's, not the tiles'
#include "ops/cpu/philox_vec.inc"
}  // namespace rng

// A pair's dropout on its probabilities (Note [Attention dropout] in
// ops/attention.cc): row i's uniforms start at element first + i * tk of the
// stream `key`. Forward keeps the dropped P' = P * mask * scale for the
// product with v, and saves -P where a probability is dropped; backward
// reads the mask back from those signs (a P of 0 needs no mask: it adds 0).
template <class T>
struct Drop {
  uint64_t key, first;
  float threshold;
  T scale;
};

// Row i of P (tk wide, softmax done, zero from n on): its dropped copy into
// pd, and the dropped entries' signs flipped in place. Uniforms are drawn
// for [0, n) only (a causal row's zeros need no mask).
template <class T>
void drop_row(const Drop<T>& d, int64_t i, int64_t n, int64_t tk, T* row, T* pd, vector<float>& u) {
  u.resize(static_cast<size_t>(n));
  rng::uniforms_from(d.key, d.first + static_cast<uint64_t>(i * tk), u.data(), n);
  for (int64_t j = 0; j < n; ++j) {
    const bool keep = u[j] >= d.threshold;
    pd[j] = keep ? row[j] * d.scale : T(0);
    row[j] = keep ? row[j] : -row[j];
  }
  std::fill(pd + n, pd + tk, T(0));
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
                  vector<T>& kt, const Drop<T>* drop, vector<T>& pd, vector<float>& u) {
  product_bt<T>(g.tq, g.tk, g.dh, in.q, in.ldq, in.k, in.ldk, p, g.tk, kt);
  const int64_t visible = visible_keys(in.pad, g.tk);
  const Band band{visible, g.tq, causal};
  for (int64_t i = 0; i < g.tq; ++i) {
    T* row = p + i * g.tk;
    if (visible > 0) {  // keys [0, n) are visible, the rest weigh exactly 0
      const int64_t n = causal ? std::min(i + 1, visible) : visible;
      softmax_prefix(row, n, g.tk, scale);
      if (drop) drop_row(*drop, i, n, g.tk, row, pd.data() + i * g.tk, u);
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
    if (drop) drop_row(*drop, i, g.tk, g.tk, row, pd.data() + i * g.tk, u);
  }
  product<T>(false, g.tq, g.dh, g.tk, drop ? pd.data() : p, g.tk, in.v, in.ldk, out, in.ldq,
             visible > 0 ? &band : nullptr);
}

// sum_j a_j b_j over n, vectorised (in an order fixed by n).
template <class T>
T row_dot(const T* a, const T* b, int64_t n) {
  using C = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
  return (C(a, n) * C(b, n)).sum();
}

// With dropout (drop_scale > 0), p holds the forward's signed probabilities:
// gv takes the dropped P' = max(p, 0) * drop_scale, dP the mask (p > 0) and
// the scale, the softmax's backward |p|.
template <class T>
void backward_pair(const Dims& g, bool causal, T scale, const Pair<T>& in, const T* p, const T* go,
                   T* gq, T* gk, T* gv, vector<T>& ds, vector<T>& vt, T drop_scale, vector<T>& pd) {
  ds.resize(static_cast<size_t>(g.tq * g.tk));
  const int64_t visible = visible_keys(in.pad, g.tk);
  const Band band{visible, g.tq, causal};
  const Band* banded = visible > 0 ? &band : nullptr;  // Note [Banded products]
  const T* signed_p = p;
  if (drop_scale > T(0)) {  // pd: P' then |P|, one pair at a time
    const int64_t n = g.tq * g.tk;
    pd.resize(static_cast<size_t>(2 * n));
    for (int64_t e = 0; e < n; ++e) {
      pd[e] = p[e] > T(0) ? p[e] * drop_scale : T(0);
      pd[n + e] = std::abs(p[e]);
    }
    product<T>(true, g.tk, g.dh, g.tq, pd.data(), g.tk, go, in.ldq, gv, in.ldk, banded);
    p = pd.data() + n;
  } else {
    product<T>(true, g.tk, g.dh, g.tq, p, g.tk, go, in.ldq, gv, in.ldk, banded);
  }
  product_bt<T>(g.tq, g.tk, g.dh, go, in.ldq, in.v, in.ldk, ds.data(), g.tk, vt);
  for (int64_t i = 0; i < g.tq; ++i) {
    T* dr = ds.data() + i * g.tk;
    const T* pr = p + i * g.tk;
    if (drop_scale > T(0)) {  // dP = mask * scale * (dout v^T)
      const T* sr = signed_p + i * g.tk;
      for (int64_t j = 0; j < g.tk; ++j) dr[j] = sr[j] > T(0) ? dr[j] * drop_scale : T(0);
    }
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
                  int64_t heads, bool causal, double drop_p, uint64_t key, Tensor& out_t,
                  Tensor& probs_t) {
  using T = compute_t<S>;
  const Dims g(q, k, heads);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(g.dh)));
  const float threshold = drop_p > 0 ? dropout_keep_threshold(drop_p) : 0.0f;
  const T drop_scale = static_cast<T>(drop_p > 0 ? 1.0 / (1.0 - drop_p) : 0.0);
  const S *pq = q.data<S>(), *pk = k.data<S>(), *pv = v.data<S>();
  const S* pad = pad_t.defined() ? pad_t.data<S>() : nullptr;
  S* out = out_t.data<S>();
  S* probs = probs_t.data<S>();
  parallel_for(0, g.b * heads, 1, [&](int64_t lo, int64_t hi) {
    vector<T> kt, pd(drop_p > 0 ? static_cast<size_t>(g.tq * g.tk) : 0);
    vector<float> u;
    Scratch16 sc;
    for (int64_t bh = lo; bh < hi; ++bh) {
      if (bh + 1 < hi) {  // Note [Prefetched pairs]
        prefetch_rows(pq + g.q_at(bh + 1), g.tq, g.dh, g.d);
        prefetch_rows(pk + g.k_at(bh + 1), g.tk, g.dh, g.d);
        prefetch_rows(pv + g.k_at(bh + 1), g.tk, g.dh, g.d);
      }
      const S* pad_b = pad ? pad + (bh / heads) * g.tk : nullptr;
      S* p = probs + bh * g.tq * g.tk;
      const Drop<T> drop{key, static_cast<uint64_t>(bh * g.tq * g.tk), threshold, drop_scale};
      const Drop<T>* dropping = drop_p > 0 ? &drop : nullptr;
      if constexpr (is_16bit_v<S>) {  // Note [bfloat16 attention]
        const Pair<float> in =
            sc.widen(g, pq + g.q_at(bh), pk + g.k_at(bh), pv + g.k_at(bh), pad_b);
        forward_pair<float>(g, causal, scale, in, sized(sc.p, g.tq * g.tk),
                            sized(sc.out, g.tq * g.dh), kt, dropping, pd, u);
        narrow_block(sc.p, 1, g.tq * g.tk, p, 0);
        narrow_block(sc.out, g.tq, g.dh, out + g.q_at(bh), g.d);
      } else {
        const Pair<T> in{pq + g.q_at(bh), pk + g.k_at(bh), pv + g.k_at(bh), pad_b, g.d, g.d};
        forward_pair<T>(g, causal, scale, in, p, out + g.q_at(bh), kt, dropping, pd, u);
      }
    }
  });
}

template <class S>
void backward_impl(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad_t,
                   const Tensor& probs_t, const Tensor& gout_t, int64_t heads, bool causal,
                   double drop_p, Tensor& gq_t, Tensor& gk_t, Tensor& gv_t) {
  using T = compute_t<S>;
  const Dims g(q, k, heads);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(g.dh)));
  const T drop_scale = static_cast<T>(drop_p > 0 ? 1.0 / (1.0 - drop_p) : 0.0);
  const S *pq = q.data<S>(), *pk = k.data<S>(), *pv = v.data<S>(), *probs = probs_t.data<S>();
  const S* gout = gout_t.data<S>();
  const S* pad = pad_t.defined() ? pad_t.data<S>() : nullptr;
  S *gq = gq_t.data<S>(), *gk = gk_t.data<S>(), *gv = gv_t.data<S>();
  parallel_for(0, g.b * heads, 1, [&](int64_t lo, int64_t hi) {
    vector<T> ds, vt, pd;
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
                             sized(sc.gv, g.tk * g.dh), ds, vt, drop_scale, pd);
        narrow_block(sc.gq, g.tq, g.dh, gq + g.q_at(bh), g.d);
        narrow_block(sc.gk, g.tk, g.dh, gk + g.k_at(bh), g.d);
        narrow_block(sc.gv, g.tk, g.dh, gv + g.k_at(bh), g.d);
      } else {
        const Pair<T> in{pq + g.q_at(bh), pk + g.k_at(bh), pv + g.k_at(bh), pad_b, g.d, g.d};
        backward_pair<T>(g, causal, scale, in, p, gout + g.q_at(bh), gq + g.q_at(bh),
                         gk + g.k_at(bh), gv + g.k_at(bh), ds, vt, drop_scale, pd);
      }
    }
  });
}

void attention_forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad,
                           int64_t heads, bool causal, double p, uint64_t key, Tensor& out,
                           Tensor& probs) {
  dispatch_floating_16(q.dtype(), "attention", [&](auto z) {
    forward_impl<decltype(z)>(q, k, v, pad, heads, causal, p, key, out, probs);
  });
}

void attention_backward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad,
                            const Tensor& probs, const Tensor& gout, int64_t heads, bool causal,
                            double p, Tensor& gq, Tensor& gk, Tensor& gv) {
  dispatch_floating_16(q.dtype(), "attention backward", [&](auto z) {
    backward_impl<decltype(z)>(q, k, v, pad, probs, gout, heads, causal, p, gq, gk, gv);
  });
}

}  // namespace

GPIPE_ISA_KERNEL(attention_forward, attention_forward_cpu);
GPIPE_ISA_KERNEL(attention_backward, attention_backward_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
