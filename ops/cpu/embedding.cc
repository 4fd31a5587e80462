// Embedding CPU kernels.
//
// The indices are validated before these run (ops/cpu/isa_dispatch.cc), so
// nothing is written if any is bad.
// Forward: rows are copied in parallel.
// Backward: a stable counting sort groups the positions by index (counts,
// prefix sums, positions in increasing order); then each vocabulary row is
// owned by exactly one task, which zeroes it (unless accumulating, when only
// the rows used are visited) and adds its positions' gradient rows in
// position order. No atomics, and the sum order is fixed, so the
// result is bit-identical for any thread count.
#include <algorithm>
#include <cstring>

#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]
#include "ops/embedding_kernels.h"

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {

constexpr int64_t kGrainElems = 1 << 14;

void embedding_forward_cpu(const Tensor& weight, const Tensor& indices, Tensor& out) {
  dispatch_floating(weight.dtype(), "embedding", [&](auto z) {
    using T = decltype(z);
    dispatch_index(indices.dtype(), "embedding", [&](auto zi) {
      using I = decltype(zi);
      const int64_t d = weight.size(1), n = indices.numel();
      const I* idx = indices.data<I>();
      const T* pw = weight.data<T>();
      T* po = out.data<T>();
      if (d == 0) return;
      parallel_for(0, n, std::max<int64_t>(1, kGrainElems / d), [&](int64_t lo, int64_t hi) {
        for (int64_t k = lo; k < hi; ++k)
          std::memcpy(po + k * d, pw + static_cast<int64_t>(idx[k]) * d, sizeof(T) * d);
      });
    });
  });
}

void embedding_backward_cpu(const Tensor& g, const Tensor& indices, bool accumulate,
                            Tensor& gweight) {
  dispatch_floating(gweight.dtype(), "embedding backward", [&](auto z) {
    using T = decltype(z);
    dispatch_index(indices.dtype(), "embedding backward", [&](auto zi) {
      using I = decltype(zi);
      const int64_t v = gweight.size(0), d = gweight.size(1), n = indices.numel();
      const I* idx = indices.data<I>();
      // Stable counting sort: positions of index i are order[start[i] .. start[i+1]).
      vector<int64_t> start(v + 1, 0);
      for (int64_t k = 0; k < n; ++k) ++start[static_cast<int64_t>(idx[k]) + 1];
      for (int64_t i = 0; i < v; ++i) start[i + 1] += start[i];
      vector<int64_t> order(n), fill(start.begin(), start.end() - 1);
      for (int64_t k = 0; k < n; ++k) order[fill[static_cast<int64_t>(idx[k])]++] = k;

      const T* pg = g.data<T>();
      T* pw = gweight.data<T>();
      if (d == 0) return;
      auto add_row = [&](int64_t i) {
        T* row = pw + i * d;
        for (int64_t s = start[i]; s < start[i + 1]; ++s) {
          const T* src = pg + order[s] * d;
          for (int64_t c = 0; c < d; ++c) row[c] += src[c];
        }
      };
      if (accumulate) {
        // Only the rows used: their list, then about kGrainElems adds per task.
        vector<int64_t> used;
        for (int64_t i = 0; i < v; ++i)
          if (start[i + 1] > start[i]) used.push_back(i);
        const int64_t per_row = d * std::max<int64_t>(1, n / std::max<int64_t>(1, used.size()));
        parallel_for(0, static_cast<int64_t>(used.size()),
                     std::max<int64_t>(1, kGrainElems / per_row), [&](int64_t lo, int64_t hi) {
                       for (int64_t u = lo; u < hi; ++u) add_row(used[u]);
                     });
        return;
      }
      // Grain: about kGrainElems elements of work (zeroing plus adds) per task.
      const int64_t grain =
          std::max<int64_t>(1, kGrainElems / d / (1 + n / std::max<int64_t>(v, 1)));
      parallel_for(0, v, grain, [&](int64_t lo, int64_t hi) {
        std::fill(pw + lo * d, pw + hi * d, T(0));
        for (int64_t i = lo; i < hi; ++i) add_row(i);
      });
    });
  });
}

}  // namespace

GPIPE_ISA_KERNEL(embedding_forward, embedding_forward_cpu);
GPIPE_ISA_KERNEL(embedding_backward, embedding_backward_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
