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

}  // namespace

GPIPE_ISA_KERNEL(cross_entropy_forward, cross_entropy_forward_cpu);
GPIPE_ISA_KERNEL(cross_entropy_backward, cross_entropy_backward_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
