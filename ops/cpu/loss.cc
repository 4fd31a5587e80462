// Cross-entropy CPU kernels, one logits row (contiguous, C classes) at a time.
//
// Forward: a serial pass counts the rows that are not ignored (the targets
// were validated by ops/cpu/isa_dispatch.cc); then, in parallel, each row gets lse = max +
// log(sum(exp(x - max))) and its loss (1 - eps) * (lse - x[t]) + eps * (lse - mean(x)). Row losses
// go to a buffer that is summed in row order afterwards, so the loss does not depend on the thread
// count. Backward: gx = (exp(x - lse) - (1 - eps) * onehot(t) - eps / C) * g / count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]
#include "ops/loss_kernels.h"

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

constexpr int64_t kGrainElems = 1 << 14;

template <class T>
using Vec = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using ConstVec = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// Eigen's exp is vectorised but clamps its argument, so exp(-inf) comes out
// as ~1e-39 (float); harmless inside a sum, but the gradient of a masked
// (-inf) logit must be exactly 0, so backward zeroes those entries.
template <class T>
constexpr T kExpCutoff = sizeof(T) == 4 ? T(-87) : T(-708);

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
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto z) {
    using T = decltype(z);
    dispatch_index(targets.dtype(), "cross_entropy", [&](auto zi) {
      using I = decltype(zi);
      const int64_t c = logits.size(-1), n = logits.numel() / c;
      const I* pt = targets.data<I>();
      const int64_t count = count_targets(pt, n, ignore_index);
      const T* px = logits.data<T>();
      T* pl = lse.data<T>();
      const double eps = label_smoothing;
      vector<double> row_loss(n, 0.0);
      parallel_for(0, n, std::max<int64_t>(1, kGrainElems / c), [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          ConstVec<T> x(px + i * c, c);
          const T mx = x.maxCoeff();
          const double l =
              static_cast<double>(mx) + std::log(static_cast<double>((x - mx).exp().sum()));
          pl[i] = static_cast<T>(l);
          const int64_t t = static_cast<int64_t>(pt[i]);
          if (t == ignore_index) continue;
          double li = (1.0 - eps) * (l - static_cast<double>(x[t]));
          if (eps != 0.0) li += eps * (l - x.template cast<double>().sum() / c);
          row_loss[i] = li;
        }
      });
      double total = 0;
      for (int64_t i = 0; i < n; ++i) total += row_loss[i];
      loss.data<T>()[0] = static_cast<T>(count > 0 ? total / count : 0.0);
    });
  });
}

void cross_entropy_backward_cpu(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                const Tensor& g, int64_t ignore_index, double label_smoothing,
                                Tensor& gx) {
  dispatch_floating(logits.dtype(), "cross_entropy backward", [&](auto z) {
    using T = decltype(z);
    dispatch_index(targets.dtype(), "cross_entropy backward", [&](auto zi) {
      using I = decltype(zi);
      const int64_t c = logits.size(-1), n = logits.numel() / c;
      const I* pt = targets.data<I>();
      const int64_t count = count_targets(pt, n, ignore_index);
      const T* px = logits.data<T>();
      const T* pl = lse.data<T>();
      T* pg = gx.data<T>();
      if (count == 0) {
        std::fill(pg, pg + n * c, T(0));
        return;
      }
      const double eps = label_smoothing;
      const T scale = static_cast<T>(static_cast<double>(g.data<T>()[0]) / count);
      const T off = static_cast<T>(eps / c);
      const T hit = static_cast<T>(1.0 - eps);
      parallel_for(0, n, std::max<int64_t>(1, kGrainElems / c), [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          Vec<T> gr(pg + i * c, c);
          const int64_t t = static_cast<int64_t>(pt[i]);
          if (t == ignore_index) {
            gr.setZero();
            continue;
          }
          const T* x = px + i * c;
          const T l = pl[i];
          gr = (ConstVec<T>(x, c) - l).exp();
          T* gp = pg + i * c;
          for (int64_t j = 0; j < c; ++j)
            gp[j] = ((x[j] - l < kExpCutoff<T> ? T(0) : gp[j]) - off) * scale;
          gp[t] -= hit * scale;
        }
      });
    });
  });
}

}  // namespace

GPIPE_ISA_KERNEL(cross_entropy_forward, cross_entropy_forward_cpu);
GPIPE_ISA_KERNEL(cross_entropy_backward, cross_entropy_backward_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
