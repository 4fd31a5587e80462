// Cross-entropy CPU kernels, one logits row (contiguous, C classes) at a time.
//
// Forward: a serial pass counts the rows that are not ignored (the targets
// were validated by ops/cpu/isa_dispatch.cc); then, in parallel, each row gets lse = max +
// log(sum(exp(x - max))) and its loss (1 - eps) * (lse - x[t]) + eps * (lse - mean(x)). Row losses
// go to a buffer that is summed in row order afterwards, so the loss does not depend on the thread
// count. Backward: gx = (exp(x - lse) - (1 - eps) * onehot(t) - eps / C) * g / count.
// 16-bit logits are read a row at a time into float32 (the loss and lse are float32).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/blas.h"
#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]
#include "ops/cpu/isa/rows.h"
#include "ops/loss_kernels.h"

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

constexpr int64_t kGrainElems = 1 << 14;

// Note [Prefetched logits rows]. A row of the vocabulary's logits (8192
// floats: 32 KB) comes from memory, since all of them (tens of MB) do not
// fit in the caches, and then its exp is compute-bound in L1. So the
// forward sums each row's exp in chunks of kChunk elements, and each chunk
// first asks for the same columns of the next row (one prefetch per cache
// line): the next row's loads overlap this row's arithmetic instead of
// following it. (The backward, which also writes a row, got slower so.)
constexpr int64_t kChunk = 512;
template <class T>
void prefetch_row_part(const T* next_row, int64_t begin, int64_t end) {
  constexpr int64_t kPerLine = 64 / static_cast<int64_t>(sizeof(T));
  for (int64_t i = begin; i < end; i += kPerLine) __builtin_prefetch(next_row + i, 0, 2);
}

// How many rows are not ignored (the targets were validated before the
// kernel ran: ops/cpu/isa_dispatch.cc).
template <class I>
int64_t count_targets(const I* t, int64_t n, int64_t ignore_index) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += static_cast<int64_t>(t[i]) != ignore_index;
  return count;
}

void cross_entropy_forward_cpu(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                               double label_smoothing, Tensor& loss, Tensor& lse) {
  // 16-bit logits: each row is widened to float32, as are the loss and lse.
  dispatch_floating_16(logits.dtype(), "cross_entropy", [&](auto z) {
    using T = decltype(z);
    using C = compute_t<T>;
    dispatch_index(targets.dtype(), "cross_entropy", [&](auto zi) {
      using I = decltype(zi);
      const int64_t c = logits.size(-1), n = logits.numel() / c;
      const I* pt = targets.data<I>();
      const int64_t count = count_targets(pt, n, ignore_index);
      const T* px = logits.data<T>();
      C* pl = lse.data<C>();
      const double eps = label_smoothing;
      vector<double> row_loss(n, 0.0);
      parallel_for(0, n, std::max<int64_t>(1, kGrainElems / c), [&](int64_t lo, int64_t hi) {
        vector<C> buf;
        for (int64_t i = lo; i < hi; ++i) {
          ConstVec<C> x(widen_row(px + i * c, c, buf), c);
          const C mx = x.maxCoeff();
          // The sum of exp(x - max) by chunks (Note [Prefetched logits rows]).
          const T* next = i + 1 < hi ? px + (i + 1) * c : nullptr;
          C sum = 0;
          for (int64_t j = 0; j < c; j += kChunk) {
            const int64_t len = std::min(kChunk, c - j);
            if (next) prefetch_row_part(next, j, j + len);
            sum += (x.segment(j, len) - mx).exp().sum();
          }
          const double l = static_cast<double>(mx) + std::log(static_cast<double>(sum));
          pl[i] = static_cast<C>(l);
          const int64_t t = static_cast<int64_t>(pt[i]);
          if (t == ignore_index) continue;
          double li = (1.0 - eps) * (l - static_cast<double>(x[t]));
          if (eps != 0.0) li += eps * (l - x.template cast<double>().sum() / c);
          row_loss[i] = li;
        }
      });
      double total = 0;
      for (int64_t i = 0; i < n; ++i) total += row_loss[i];
      loss.data<C>()[0] = static_cast<C>(count > 0 ? total / count : 0.0);
    });
  });
}

// 16-bit logits: each row's gradient is computed in float32 and rounded once.
void cross_entropy_backward_cpu(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                const Tensor& g, int64_t ignore_index, double label_smoothing,
                                Tensor& gx) {
  dispatch_floating_16(logits.dtype(), "cross_entropy backward", [&](auto z) {
    using T = decltype(z);
    using C = compute_t<T>;
    dispatch_index(targets.dtype(), "cross_entropy backward", [&](auto zi) {
      using I = decltype(zi);
      const int64_t c = logits.size(-1), n = logits.numel() / c;
      const I* pt = targets.data<I>();
      const int64_t count = count_targets(pt, n, ignore_index);
      const T* px = logits.data<T>();
      const C* pl = lse.data<C>();
      T* pg = gx.data<T>();
      if (count == 0) {
        for (int64_t i = 0; i < n * c; ++i) store_float(pg, i, 0.0f);
        return;
      }
      const double eps = label_smoothing;
      const C scale = static_cast<C>(static_cast<double>(g.data<C>()[0]) / count);
      const C off = static_cast<C>(eps / c);
      const C hit = static_cast<C>(1.0 - eps);
      parallel_for(0, n, std::max<int64_t>(1, kGrainElems / c), [&](int64_t lo, int64_t hi) {
        vector<C> xbuf, gbuf;
        for (int64_t i = lo; i < hi; ++i) {
          C* gp;
          if constexpr (is_16bit_v<T>) {
            gbuf.resize(static_cast<size_t>(c));
            gp = gbuf.data();
          } else {
            gp = pg + i * c;
          }
          Vec<C> gr(gp, c);
          const int64_t t = static_cast<int64_t>(pt[i]);
          if (t == ignore_index) {
            gr.setZero();
          } else {
            const C* x = widen_row(px + i * c, c, xbuf);
            const C l = pl[i];
            gr = (ConstVec<C>(x, c) - l).exp();
            for (int64_t j = 0; j < c; ++j)
              gp[j] = ((x[j] - l < kExpCutoff<C> ? C(0) : gp[j]) - off) * scale;
            gp[t] -= hit * scale;
          }
          if constexpr (is_16bit_v<T>) narrow_row(gp, pg + i * c, c);
        }
      });
    });
  });
}

// linear_cross_entropy_fused on the CPU (Note [Fused output loss] in
// ops/loss.cc). The rows go through in chunks of z's rows; for each chunk:
//   1. z = x_chunk w^T, float32 logits [rows, C] in one buffer that stays in
//      the caches (the scratch z; bfloat16 x and w: the bfloat16 GEMM, float32 sums, no
//      rounding of the logits);
//   2. per row, one pass: max, the exponentials written over z (one exp per
//      logit, where the separate forward and backward take one each), their
//      sum, lse and the row's loss; with a gradient, z becomes
//      (softmax - smoothed one-hot) / count in place (zero on ignored rows);
//   3. with a gradient, gx_chunk = z w and gw += z^T x_chunk (bfloat16: z
//      rounded to bfloat16 first, as the composed 16-bit ops round the logits'
//      gradient; gx rounded once, gw summed in float32).
// The rows' losses are summed in row order at the end, as the separate
// forward sums them, so the loss does not depend on the chunk or thread count.
template <class I>
void head_chunk_rows(float* z, int64_t rows, int64_t c, const I* t, int64_t ignore_index,
                     double eps, bool grad, double scale, double* row_loss) {
  const float off = static_cast<float>(eps / c), hit = static_cast<float>(1.0 - eps);
  const float fscale = static_cast<float>(scale);
  parallel_for(0, rows, std::max<int64_t>(1, kGrainElems / c), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      Vec<float> r(z + i * c, c);
      const int64_t ti = static_cast<int64_t>(t[i]);
      const bool ignored = ti == ignore_index;
      const float mx = r.maxCoeff();
      const double mean = eps != 0.0 && !ignored ? r.template cast<double>().sum() / c : 0.0;
      const double zt = ignored ? 0.0 : static_cast<double>(r[ti]);
      float sum;
      if (grad) {
        r = (r - mx).exp();
        sum = r.sum();
      } else {
        sum = (r - mx).exp().sum();
      }
      const double lse = static_cast<double>(mx) + std::log(static_cast<double>(sum));
      row_loss[i] = ignored ? 0.0 : (1.0 - eps) * (lse - zt) + eps * (lse - mean);
      if (!grad) continue;
      if (ignored) {
        r.setZero();
        continue;
      }
      const float inv = 1.0f / sum;
      r = (r * inv - off) * fscale;
      r[ti] -= hit * fscale;
    }
  });
}

void linear_cross_entropy_cpu(const Tensor& x, const Tensor& w, const Tensor& targets,
                              int64_t ignore_index, double label_smoothing, Tensor& zs, Tensor& zhs,
                              Tensor& loss, Tensor& gx, Tensor& gw) {
  const bool bf16 = x.dtype() == DType::kBFloat16;
  if (!bf16 && x.dtype() != DType::kFloat32)
    isa_fail("linear_cross_entropy: the CPU kernel takes float32 or bfloat16 x and w");
  dispatch_index(targets.dtype(), "linear_cross_entropy", [&](auto zi) {
    using I = decltype(zi);
    const int64_t d = x.size(-1), n = x.numel() / d, c = w.size(0);
    const I* pt = targets.data<I>();
    const int64_t count = count_targets(pt, n, ignore_index);
    const bool grad = gx.defined() && count > 0;
    const double scale = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
    const int64_t per = zs.size(0);
    float* z = zs.data<float>();
    bfloat16* zh = zhs.defined() ? zhs.data<bfloat16>() : nullptr;
    vector<double> row_loss(static_cast<size_t>(n), 0.0);
    float* pgw = gw.defined() ? gw.data<float>() : nullptr;
    for (int64_t r0 = 0; r0 < n; r0 += per) {
      const int64_t rows = std::min(per, n - r0);
      if (bf16) {
        const auto* px = reinterpret_cast<const uint16_t*>(x.data<bfloat16>()) + r0 * d;
        const auto* pw = reinterpret_cast<const uint16_t*>(w.data<bfloat16>());
        cpu::gemm_bf16(false, true, rows, c, d, 1.0f, px, d, pw, d, 0.0f, z, c, true);
        head_chunk_rows(z, rows, c, pt + r0, ignore_index, label_smoothing, grad, scale,
                        row_loss.data() + r0);
        if (!grad) continue;
        narrow_row(z, zh, rows * c);
        const auto* pz = reinterpret_cast<const uint16_t*>(zh);
        GemmEpilogue ep;
        ep.bf16_out = reinterpret_cast<uint16_t*>(gx.data<bfloat16>()) + r0 * d;
        ep.ld_bf16_out = d;
        cpu::gemm_bf16_out(false, false, rows, d, c, pz, c, pw, d, ep, true);
        cpu::gemm_bf16(true, false, c, d, rows, 1.0f, pz, c, px, d, r0 == 0 ? 0.0f : 1.0f, pgw, d,
                       true);
      } else {
        const float* px = x.data<float>() + r0 * d;
        const float* pw = w.data<float>();
        cpu::parallel_gemm<float>(false, true, rows, c, d, 1.0f, px, d, pw, d, 0.0f, z, c);
        head_chunk_rows(z, rows, c, pt + r0, ignore_index, label_smoothing, grad, scale,
                        row_loss.data() + r0);
        if (!grad) continue;
        cpu::parallel_gemm<float>(false, false, rows, d, c, 1.0f, z, c, pw, d, 0.0f,
                                  gx.data<float>() + r0 * d, d);
        cpu::parallel_gemm<float>(true, false, c, d, rows, 1.0f, z, c, px, d, r0 == 0 ? 0.0f : 1.0f,
                                  pgw, d);
      }
    }
    if (gx.defined() && !grad) {  // every row ignored: zero gradients
      if (bf16) {
        auto* g16 = gx.data<bfloat16>();
        for (int64_t i = 0; i < n * d; ++i) store_float(g16, i, 0.0f);
      } else {
        std::fill_n(gx.data<float>(), n * d, 0.0f);
      }
      std::fill_n(pgw, c * d, 0.0f);
    }
    double total = 0;
    for (int64_t i = 0; i < n; ++i) total += row_loss[static_cast<size_t>(i)];
    loss.data<float>()[0] = static_cast<float>(count > 0 ? total / count : 0.0);
  });
}

}  // namespace

GPIPE_ISA_KERNEL(cross_entropy_forward, cross_entropy_forward_cpu);
GPIPE_ISA_KERNEL(cross_entropy_backward, cross_entropy_backward_cpu);
GPIPE_ISA_KERNEL(linear_cross_entropy_fused, linear_cross_entropy_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
