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
#include <algorithm>
#include <cmath>
#include <vector>

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

template <class T>
bool masked(const T* pad, bool causal, int64_t i, int64_t j) {
  return (causal && j > i) || (pad != nullptr && pad[j] != T(0));
}

// A score row whose first n keys are visible and the rest masked (no padding
// mask): softmax(scale * row[0, n)) there and exact zeros after, as the
// masked form computes it, without a mask test per element (n == 0 only
// when there are no keys at all).
template <class T>
void softmax_prefix(T* row, int64_t n, int64_t tk, T scale) {
  if (n == 0) return;
  Row<T> r(row, n);
  r *= scale;
  const T mx = r.maxCoeff();
  r = (r - mx).exp();
  r *= T(1) / r.sum();
  std::fill(row + n, row + tk, T(0));
}

template <class T>
void forward_impl(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad_t,
                  int64_t heads, bool causal, Tensor& out_t, Tensor& probs_t) {
  const Dims g(q, k, heads);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(g.dh)));
  const T *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>();
  const T* pad = pad_t.defined() ? pad_t.data<T>() : nullptr;
  T* out = out_t.data<T>();
  T* probs = probs_t.data<T>();
  parallel_for(0, g.b * heads, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t bh = lo; bh < hi; ++bh) {
      T* p = probs + bh * g.tq * g.tk;
      const T* pad_b = pad ? pad + (bh / heads) * g.tk : nullptr;
      cpu::gemm<T>(false, true, g.tq, g.tk, g.dh, T(1), pq + g.q_at(bh), g.d, pk + g.k_at(bh), g.d,
                   T(0), p, g.tk);
      for (int64_t i = 0; i < g.tq; ++i) {
        T* row = p + i * g.tk;
        if (!pad_b) {  // keys [0, n) are visible, the rest weigh exactly 0
          const int64_t n = causal ? std::min(i + 1, g.tk) : g.tk;
          softmax_prefix(row, n, g.tk, scale);
          continue;
        }
        for (int64_t j = 0; j < g.tk; ++j)
          row[j] = masked(pad_b, causal, i, j) ? T(kMasked) : row[j] * scale;
        Row<T> r(row, g.tk);
        const T mx = r.maxCoeff();
        r = (r - mx).exp();
        if (mx > T(kMasked))  // masked keys weigh exactly 0 (a vectorised exp leaves ~1e-39)
          for (int64_t j = 0; j < g.tk; ++j)
            if (masked(pad_b, causal, i, j)) row[j] = T(0);
        r *= T(1) / r.sum();
      }
      cpu::gemm<T>(false, false, g.tq, g.dh, g.tk, T(1), p, g.tk, pv + g.k_at(bh), g.d, T(0),
                   out + g.q_at(bh), g.d);
    }
  });
}

template <class T>
void backward_impl(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad_t,
                   const Tensor& probs_t, const Tensor& gout_t, int64_t heads, bool causal,
                   Tensor& gq_t, Tensor& gk_t, Tensor& gv_t) {
  const Dims g(q, k, heads);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(g.dh)));
  const T *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>(), *probs = probs_t.data<T>();
  const T* gout = gout_t.data<T>();
  const T* pad = pad_t.defined() ? pad_t.data<T>() : nullptr;
  T *gq = gq_t.data<T>(), *gk = gk_t.data<T>(), *gv = gv_t.data<T>();
  parallel_for(0, g.b * heads, 1, [&](int64_t lo, int64_t hi) {
    vector<T> ds(static_cast<size_t>(g.tq * g.tk));
    for (int64_t bh = lo; bh < hi; ++bh) {
      const T* p = probs + bh * g.tq * g.tk;
      const T* go = gout + g.q_at(bh);
      const T* pad_b = pad ? pad + (bh / heads) * g.tk : nullptr;
      cpu::gemm<T>(true, false, g.tk, g.dh, g.tq, T(1), p, g.tk, go, g.d, T(0), gv + g.k_at(bh),
                   g.d);
      cpu::gemm<T>(false, true, g.tq, g.tk, g.dh, T(1), go, g.d, pv + g.k_at(bh), g.d, T(0),
                   ds.data(), g.tk);
      for (int64_t i = 0; i < g.tq; ++i) {
        T* dr = ds.data() + i * g.tk;
        const T* pr = p + i * g.tk;
        T dot = 0;
        for (int64_t j = 0; j < g.tk; ++j) dot += dr[j] * pr[j];
        if (!pad_b) {  // keys [0, n) visible: no mask test per element
          const int64_t n = causal ? std::min(i + 1, g.tk) : g.tk;
          for (int64_t j = 0; j < n; ++j) dr[j] = pr[j] * (dr[j] - dot) * scale;
          std::fill(dr + n, dr + g.tk, T(0));
          continue;
        }
        for (int64_t j = 0; j < g.tk; ++j)
          dr[j] = masked(pad_b, causal, i, j) ? T(0) : pr[j] * (dr[j] - dot) * scale;
      }
      cpu::gemm<T>(false, false, g.tq, g.dh, g.tk, T(1), ds.data(), g.tk, pk + g.k_at(bh), g.d,
                   T(0), gq + g.q_at(bh), g.d);
      cpu::gemm<T>(true, false, g.tk, g.dh, g.tq, T(1), ds.data(), g.tk, pq + g.q_at(bh), g.d, T(0),
                   gk + g.k_at(bh), g.d);
    }
  });
}

void attention_forward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad,
                           int64_t heads, bool causal, Tensor& out, Tensor& probs) {
  dispatch_floating(q.dtype(), "attention", [&](auto z) {
    forward_impl<decltype(z)>(q, k, v, pad, heads, causal, out, probs);
  });
}

void attention_backward_cpu(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad,
                            const Tensor& probs, const Tensor& gout, int64_t heads, bool causal,
                            Tensor& gq, Tensor& gk, Tensor& gv) {
  dispatch_floating(q.dtype(), "attention backward", [&](auto z) {
    backward_impl<decltype(z)>(q, k, v, pad, probs, gout, heads, causal, gq, gk, gv);
  });
}

}  // namespace

GPIPE_ISA_KERNEL(attention_forward, attention_forward_cpu);
GPIPE_ISA_KERNEL(attention_backward, attention_backward_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
