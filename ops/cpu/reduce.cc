// Reductions over the middle axis of [outer, n, inner]. With inner == 1 each
// output is a dot-free contiguous sum (accumulated in double for float32);
// otherwise rows of length `inner` are added into the output row, a loop the
// compiler vectorises. Work is split over `outer` (or over `inner` when outer
// is 1), never across the reduced axis, so results are deterministic.
#include <cstring>

#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]
#include "ops/reduce_kernels.h"

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

void sum_cpu(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out) {
  dispatch_floating(x.dtype(), "sum", [&](auto z) {
    using T = decltype(z);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    if (inner == 1) {
      parallel_for(0, outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)),
                   [&](int64_t lo, int64_t hi) {
                     for (int64_t o = lo; o < hi; ++o) {
                       const T* row = px + o * n;
                       double acc = 0;
                       for (int64_t i = 0; i < n; ++i) acc += row[i];
                       po[o] = static_cast<T>(acc);
                     }
                   });
      return;
    }
    auto body = [&](int64_t o, int64_t i0, int64_t i1) {
      T* dst = po + o * inner;
      for (int64_t i = i0; i < i1; ++i) dst[i] = T(0);
      for (int64_t k = 0; k < n; ++k) {
        const T* src = px + (o * n + k) * inner;
        for (int64_t i = i0; i < i1; ++i) dst[i] += src[i];
      }
    };
    if (outer > 1) {
      parallel_for(0, outer, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t o = lo; o < hi; ++o) body(o, 0, inner);
      });
    } else {
      parallel_for(0, inner, 1024, [&](int64_t lo, int64_t hi) { body(0, lo, hi); });
    }
  });
}

void max_cpu(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out,
             Tensor& argmax) {
  dispatch_floating(x.dtype(), "max", [&](auto z) {
    using T = decltype(z);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    int64_t* pa = argmax.data<int64_t>();
    parallel_for(0, outer, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        T* dst = po + o * inner;
        int64_t* idx = pa + o * inner;
        const T* base = px + o * n * inner;
        for (int64_t i = 0; i < inner; ++i) {
          dst[i] = base[i];
          idx[i] = 0;
        }
        for (int64_t k = 1; k < n; ++k) {
          const T* src = base + k * inner;
          for (int64_t i = 0; i < inner; ++i) {
            if (src[i] > dst[i]) {
              dst[i] = src[i];
              idx[i] = k;
            }
          }
        }
      }
    });
  });
}

void max_backward_cpu(const Tensor& g, const Tensor& argmax, int64_t outer, int64_t n,
                      int64_t inner, Tensor& gx) {
  dispatch_floating(g.dtype(), "max backward", [&](auto z) {
    using T = decltype(z);
    const T* pg = g.data<T>();
    const int64_t* pa = argmax.data<int64_t>();
    T* po = gx.data<T>();
    std::memset(po, 0, gx.nbytes());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i)
        po[(o * n + pa[o * inner + i]) * inner + i] = pg[o * inner + i];
  });
}

void sum_squares_cpu(const Tensor& x, Tensor& out, int64_t index) {
  const int64_t n = x.numel(), blocks = (n + kSquaresBlock - 1) / kSquaresBlock;
  vector<double> partial(static_cast<size_t>(blocks), 0.0);  // the prelude's, not std's
  dispatch_floating(x.dtype(), "sum_of_squares", [&](auto z) {
    using T = decltype(z);
    const T* __restrict p = x.data<T>();
    parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        double acc = 0.0;
        for (int64_t i = b * kSquaresBlock, end = std::min(n, i + kSquaresBlock); i < end; ++i) {
          const double v = static_cast<double>(p[i]);
          acc += v * v;
        }
        partial[static_cast<size_t>(b)] = acc;
      }
    });
  });
  double total = 0.0;
  for (double v : partial) total += v;
  out.data<double>()[index] = total;
}

}  // namespace

GPIPE_ISA_KERNEL(sum_squares_into, sum_squares_cpu);
GPIPE_ISA_KERNEL(reduce_sum, sum_cpu);
GPIPE_ISA_KERNEL(reduce_max, max_cpu);
GPIPE_ISA_KERNEL(reduce_max_backward, max_backward_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
