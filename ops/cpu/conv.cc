// CPU kernels for conv2d (NCHW).
//
// General path: for one (sample, group), im2col unfolds the input's receptive
// fields into a column buffer col[Cg*kh*kw, OH*OW] (zeros where a tap falls in
// the padding), and forward is one GEMM, y_g[Og, OH*OW] = w_g[Og, K] * col.
// Backward-input is col = w_g^T * grad_y_g followed by col2im (the scatter-add
// inverse of im2col); backward-weight accumulates grad_y_g * col^T over the
// batch. A 1x1, stride-1, unpadded convolution skips the buffer: its "col" is
// the input plane itself.
//
// Depthwise path (one input channel per group, groups > 1): a direct loop per
// (sample, channel) plane, one kernel tap at a time over contiguous output
// rows; unfolding would cost more than the arithmetic.
//
// Batched path (one group, small planes): several samples' columns side by
// side in one GEMM; Note [Batched small planes]. The same path multiplies
// bfloat16 operands under bf16 precision: Note [16-bit convolution].
//
// Parallelism: over (sample, group) tasks when there are at least as many as
// threads, otherwise tasks run in order and each GEMM is split over the pool.
// Backward-weight over a large batch gives each thread a contiguous range of
// samples and its own partial sum, reduced in a fixed order: the result does
// not vary from run to run (it may differ in round-off with the thread count).
// Column buffers are tensors charged to MemoryCategory::kWorkspace.
#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/conv_kernels.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/conv_loops.h"
#include "ops/cpu/isa/prelude.h"  // this file is built per ISA level: Note [CPU ISA kernels]

namespace gpipe::ops::cpu::GPIPE_ISA_NS {
namespace {
// ---------------------------------------------------------------- GEMM path

template <class T>
void gemm_forward(const Geometry& g, const Tensor& like, const T* x, const T* w, const T* b, T* y) {
  const bool pointwise = g.pointwise();
  for_each_task<T>(g, like, !pointwise, [&](int64_t t, T* col, bool parallel) {
    const int64_t n = t / g.groups, gr = t % g.groups;
    const T* xg = x + (n * g.c + gr * g.cg) * g.hw;
    T* yg = y + (n * g.o + gr * g.og) * g.ohw;
    if (!pointwise) im2col_maybe_parallel(g, xg, col, parallel);
    if (b) {
      for (int64_t r = 0; r < g.og; ++r)
        std::fill(yg + r * g.ohw, yg + (r + 1) * g.ohw, b[gr * g.og + r]);
    }
    gemm_maybe_parallel(parallel, false, false, g.og, g.ohw, g.k, w + gr * g.og * g.k, g.k,
                        pointwise ? xg : col, g.ohw, b ? T(1) : T(0), yg, g.ohw);
  });
}

template <class T>
void gemm_backward_input(const Geometry& g, const Tensor& like, const T* gy, const T* w, T* gx) {
  const bool pointwise = g.pointwise();
  for_each_task<T>(g, like, !pointwise, [&](int64_t t, T* col, bool parallel) {
    const int64_t n = t / g.groups, gr = t % g.groups;
    const T* gyg = gy + (n * g.o + gr * g.og) * g.ohw;
    T* gxg = gx + (n * g.c + gr * g.cg) * g.hw;
    gemm_maybe_parallel(parallel, true, false, g.k, g.ohw, g.og, w + gr * g.og * g.k, g.k, gyg,
                        g.ohw, T(0), pointwise ? gxg : col, g.ohw);
    if (pointwise) return;
    if (!parallel) return col2im(g, col, 0, g.cg, gxg, g.ohw);
    parallel_for(0, g.cg, 1, [&](int64_t lo, int64_t hi) { col2im(g, col, lo, hi, gxg, g.ohw); });
  });
}

// grad_w_g[Og, K] (+)= grad_y_g[Og, OH*OW] * col^T for samples [n_lo, n_hi).
template <class T>
void accumulate_weight_grad(const Geometry& g, const T* gy, const T* x, int64_t n_lo, int64_t n_hi,
                            T* col, bool parallel, T* gw) {
  const bool pointwise = g.pointwise();
  for (int64_t n = n_lo; n < n_hi; ++n) {
    for (int64_t gr = 0; gr < g.groups; ++gr) {
      const T* xg = x + (n * g.c + gr * g.cg) * g.hw;
      if (!pointwise) im2col_maybe_parallel(g, xg, col, parallel);
      gemm_maybe_parallel(parallel, false, true, g.og, g.k, g.ohw,
                          gy + (n * g.o + gr * g.og) * g.ohw, g.ohw, pointwise ? xg : col, g.ohw,
                          n == n_lo ? T(0) : T(1), gw + gr * g.og * g.k, g.k);
    }
  }
}

template <class T>
void gemm_backward_weight(const Geometry& g, const Tensor& like, const T* gy, const T* x, T* gw) {
  const int64_t threads = intra_op_threads();
  const int64_t col_size = g.pointwise() ? 0 : g.k * g.ohw;
  const int64_t w_size = g.o * g.k;
  if (g.n < threads || threads == 1) {
    Workspace<T> col = workspace<T>(like, col_size);
    accumulate_weight_grad(g, gy, x, 0, g.n, col.data(), true, gw);
    return;
  }
  // Part 0 sums into gw itself, the others into partial buffers.
  Workspace<T> cols = workspace<T>(like, threads * col_size);
  Workspace<T> partials = workspace<T>(like, (threads - 1) * w_size);
  T* col_base = cols.data();
  T* partial_base = partials.data();
  for_each_part(g.n, threads, [&](int64_t part, int64_t lo, int64_t hi) {
    T* dst = part == 0 ? gw : partial_base + (part - 1) * w_size;
    accumulate_weight_grad(g, gy, x, lo, hi, col_base + part * col_size, false, dst);
  });
  parallel_for(0, w_size, 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t part = 1; part < threads; ++part) {
      const T* src = partial_base + (part - 1) * w_size;
      axpy(hi - lo, T(1), src + lo, 1, gw + lo, 1);
    }
  });
}

// ---------------------------------------------------------------- batched path

// Note [Batched small planes]. On small planes (AmoebaNet's 8x8 down to 1x1)
// a sample's GEMM is [Og, K] x [K, OH*OW] with OH*OW = 64 .. 1: too thin
// for any kernel to run near peak, and one call per sample. With one group,
// a run of samples instead puts its columns side by side in one buffer
// cols[K, nb*OH*OW] (sample s in columns [s*OHW, (s+1)*OHW); a 1x1
// unpadded convolution just gathers its planes), so forward is one GEMM
// Y'[O, nb*OHW] = W cols, copied out to y[n, o, :]; backward-input one GEMM
// gcols = W^T gY' (gY' gathered from gy the same way), then col2im per
// sample; backward-weight gW += gY' cols^T. The runs are fixed by the shape
// (about kBatchedColumns columns each, and at least kMinRuns of them so that
// threads have work), the threads take contiguous groups of them, and the weight gradient sums at
// most kWeightGroups partials in a fixed order: the results do not depend on the thread count.
constexpr int64_t kBatchedPlane = 512;             // OH*OW below this takes the batched path
constexpr int64_t kBatchedColumns = 2048;          // GEMM columns per run of samples
constexpr int64_t kBatchedMax = int64_t{1} << 21;  // elements per buffer (8 MB of float)

constexpr int64_t kMinRuns = 4;  // runs at least (batch allowing): work for 4 threads

bool batched(const Geometry& g) { return g.groups == 1 && g.ohw < kBatchedPlane && g.n > 1; }

// Samples per run: about kBatchedColumns columns, within kBatchedMax per
// buffer, and at least kMinRuns runs: a shape-only rule, so the runs (and the
// GEMM shapes, hence the round-off) do not depend on the thread count.
int64_t run_samples(const Geometry& g) {
  const int64_t by_width = std::max<int64_t>(1, kBatchedColumns / g.ohw);
  const int64_t by_memory = kBatchedMax / std::max<int64_t>(std::max(g.k, g.o) * g.ohw, 1);
  const int64_t by_runs = (g.n + kMinRuns - 1) / kMinRuns;
  return std::clamp<int64_t>(std::min({by_width, by_memory, by_runs}), 1, g.n);
}

// Between t[n, ch, OHW] (samples [n0, n0 + nb)) and t'[ch, nb*OHW].
template <class T>
void gather_planes(const T* t, int64_t ch, int64_t ohw, int64_t n0, int64_t nb, T* out) {
  for (int64_t s = 0; s < nb; ++s)
    for (int64_t c = 0; c < ch; ++c) {
      const T* src = t + ((n0 + s) * ch + c) * ohw;
      std::copy(src, src + ohw, out + c * nb * ohw + s * ohw);
    }
}
template <class T>
void scatter_planes(const T* in, int64_t ch, int64_t ohw, int64_t n0, int64_t nb, T* t) {
  for (int64_t s = 0; s < nb; ++s)
    for (int64_t c = 0; c < ch; ++c) {
      const T* src = in + c * nb * ohw + s * ohw;
      std::copy(src, src + ohw, t + ((n0 + s) * ch + c) * ohw);
    }
}

// cols[K, nb*OHW] for samples [n0, n0 + nb).
template <class T>
void batched_cols(const Geometry& g, const T* x, int64_t n0, int64_t nb, T* cols) {
  if (g.pointwise()) return gather_planes(x, g.c, g.hw, n0, nb, cols);
  for (int64_t s = 0; s < nb; ++s)
    im2col(g, x + (n0 + s) * g.c * g.hw, 0, g.c, cols + s * g.ohw, nb * g.ohw);
}

int64_t run_count(const Geometry& g) {
  const int64_t per_run = run_samples(g);
  return (g.n + per_run - 1) / per_run;
}

// Runs of samples: run r is samples [r * per_run, min(n, (r + 1) * per_run)),
// fixed by the shape alone. body(group, n0, nb, a, b) is called for every run,
// the runs cut into `groups` contiguous groups that run in parallel, each
// group's runs in order on one thread with that thread's two buffers (of A
// and of B elements, a_size and b_size per sample of a run).
template <class A, class B, class F>
void for_each_run(const Geometry& g, const Tensor& like, int64_t groups, int64_t a_size,
                  int64_t b_size, const F& body) {
  const int64_t per_run = run_samples(g), runs = run_count(g);
  parallel_for(0, groups, 1, [&](int64_t lo, int64_t hi) {
    Workspace<A> a = workspace<A>(like, a_size * per_run);
    Workspace<B> b = workspace<B>(like, b_size * per_run);
    for (int64_t group = lo; group < hi; ++group)
      for (int64_t r = runs * group / groups; r < runs * (group + 1) / groups; ++r) {
        const int64_t n0 = r * per_run;
        body(group, n0, std::min(per_run, g.n - n0), a.data(), b.data());
      }
  });
}
// Groups for runs whose results are independent (forward, backward-input):
// one per thread.
int64_t thread_groups(const Geometry& g) {
  return std::min<int64_t>(intra_op_threads(), run_count(g));
}
// Groups for the weight gradient: each sums its runs into its own partial,
// and the partials are added in group order. The grouping depends on the
// shape only, so the result does not depend on the thread count.
constexpr int64_t kWeightGroups = 8;

// One thread's GEMM on In operands into an Out C: float or double as they
// are, bfloat16 bits (uint16_t) into float32 by the bfloat16 GEMM.
template <class T>
void run_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
              const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  cpu::gemm(ta, tb, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
}
inline void run_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
                     int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c,
                     int64_t ldc) {
  cpu::gemm_bf16(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc, /*parallel=*/false);
}

// In: the element type of x, weight and grad_y; Out: of y, grad_x, grad_weight
// and bias (the same float type, or bfloat16 bits in and float32 out: Note
// [16-bit convolution]).
template <class In, class Out>
void batched_forward(const Geometry& g, const Tensor& like, const In* x, const In* w, const Out* b,
                     Out* y) {
  for_each_run<In, Out>(g, like, thread_groups(g), g.k * g.ohw, g.o * g.ohw,
                        [&](int64_t, int64_t n0, int64_t nb, In* cols, Out* out) {
                          const int64_t n = nb * g.ohw;
                          batched_cols(g, x, n0, nb, cols);
                          if (b)
                            for (int64_t o = 0; o < g.o; ++o)
                              std::fill(out + o * n, out + (o + 1) * n, b[o]);
                          run_gemm(false, false, g.o, n, g.k, w, g.k, cols, n, b ? Out(1) : Out(0),
                                   out, n);
                          scatter_planes(out, g.o, g.ohw, n0, nb, y);
                        });
}

template <class In, class Out>
void batched_backward_input(const Geometry& g, const Tensor& like, const In* gy, const In* w,
                            Out* gx) {
  for_each_run<In, Out>(g, like, thread_groups(g), g.o * g.ohw, g.k * g.ohw,
                        [&](int64_t, int64_t n0, int64_t nb, In* gout, Out* gcols) {
                          const int64_t n = nb * g.ohw;
                          gather_planes(gy, g.o, g.ohw, n0, nb, gout);
                          run_gemm(true, false, g.k, n, g.o, w, g.k, gout, n, Out(0), gcols, n);
                          if (g.pointwise()) return scatter_planes(gcols, g.c, g.hw, n0, nb, gx);
                          for (int64_t s = 0; s < nb; ++s)
                            col2im(g, gcols + s * g.ohw, 0, g.c, gx + (n0 + s) * g.c * g.hw, n);
                        });
}

template <class In, class Out>
void batched_backward_weight(const Geometry& g, const Tensor& like, const In* gy, const In* x,
                             Out* gw) {
  // Group 0 sums into gw itself, the others into partial buffers.
  const int64_t groups = std::min(kWeightGroups, run_count(g)), w_size = g.o * g.k;
  Workspace<Out> partials = workspace<Out>(like, (groups - 1) * w_size);
  vector<int64_t> first(groups, -1);  // each group's first sample: beta 0 there
  for_each_run<In, In>(g, like, groups, g.k * g.ohw, g.o * g.ohw,
                       [&](int64_t group, int64_t n0, int64_t nb, In* cols, In* gout) {
                         const int64_t n = nb * g.ohw;
                         if (first[group] < 0) first[group] = n0;
                         Out* dst = group == 0 ? gw : partials.data() + (group - 1) * w_size;
                         batched_cols(g, x, n0, nb, cols);
                         gather_planes(gy, g.o, g.ohw, n0, nb, gout);
                         run_gemm(false, true, g.o, g.k, n, gout, n, cols, n,
                                  first[group] == n0 ? Out(0) : Out(1), dst, g.k);
                       });
  if (groups > 1)
    parallel_for(0, w_size, 4096, [&](int64_t lo, int64_t hi) {
      for (int64_t group = 1; group < groups; ++group)
        axpy(hi - lo, Out(1), partials.data() + (group - 1) * w_size + lo, 1, gw + lo, 1);
    });
}

// Note [16-bit convolution]. Under bf16 precision the front function
// (ops/conv.cc) hands one-group convolutions to these kernels with x,
// weight and grad_y as bfloat16 tensors and y, grad_x and grad_weight as
// float32: the batched path with bfloat16 columns multiplied by the
// bfloat16 GEMM (AVX512_BF16 dot products where the CPU has them, else
// widened to float32 while packing), float32 sums. The bias is float32.
const uint16_t* bf16_bits(const Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data<bfloat16>());
}

void check_bf16_conv(const Geometry& g, const Tensor& out) {
  if (g.groups != 1 || out.dtype() != DType::kFloat32)
    isa_fail("conv2d: bfloat16 operands need groups == 1 and a float32 result (a gpipe bug)");
}

// ---------------------------------------------------------------- kernels

void conv2d_forward_cpu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Conv2dParams& params, Tensor& y) {
  const Geometry g(x.shape(), weight.shape(), y.shape(), params);
  if (x.dtype() == DType::kBFloat16) {
    check_bf16_conv(g, y);
    return batched_forward(g, x, bf16_bits(x), bf16_bits(weight),
                           bias.defined() ? bias.data<float>() : nullptr, y.data<float>());
  }
  dispatch_floating(x.dtype(), "conv2d", [&](auto z) {
    using T = decltype(z);
    const T* b = bias.defined() ? bias.data<T>() : nullptr;
    if (g.depthwise())
      depthwise_forward(g, x.data<T>(), weight.data<T>(), b, y.data<T>());
    else if (batched(g))
      batched_forward(g, x, x.data<T>(), weight.data<T>(), b, y.data<T>());
    else
      gemm_forward(g, x, x.data<T>(), weight.data<T>(), b, y.data<T>());
  });
}

void conv2d_backward_input_cpu(const Tensor& grad_y, const Tensor& weight,
                               const Conv2dParams& params, Tensor& grad_x) {
  const Geometry g(grad_x.shape(), weight.shape(), grad_y.shape(), params);
  if (grad_y.dtype() == DType::kBFloat16) {
    check_bf16_conv(g, grad_x);
    return batched_backward_input(g, grad_y, bf16_bits(grad_y), bf16_bits(weight),
                                  grad_x.data<float>());
  }
  dispatch_floating(grad_y.dtype(), "conv2d backward", [&](auto z) {
    using T = decltype(z);
    if (g.depthwise()) {
      depthwise_backward_input(g, grad_y.data<T>(), weight.data<T>(), grad_x.data<T>());
    } else if (batched(g)) {
      batched_backward_input(g, grad_y, grad_y.data<T>(), weight.data<T>(), grad_x.data<T>());
    } else {
      gemm_backward_input(g, grad_y, grad_y.data<T>(), weight.data<T>(), grad_x.data<T>());
    }
  });
}

void conv2d_backward_weight_cpu(const Tensor& grad_y, const Tensor& x, const Conv2dParams& params,
                                Tensor& grad_weight) {
  const Geometry g(x.shape(), grad_weight.shape(), grad_y.shape(), params);
  if (grad_y.dtype() == DType::kBFloat16) {
    check_bf16_conv(g, grad_weight);
    if (g.n == 0)
      return std::fill(grad_weight.data<float>(), grad_weight.data<float>() + grad_weight.numel(),
                       0.0f);
    return batched_backward_weight(g, x, bf16_bits(grad_y), bf16_bits(x),
                                   grad_weight.data<float>());
  }
  dispatch_floating(grad_y.dtype(), "conv2d backward", [&](auto z) {
    using T = decltype(z);
    if (g.n == 0) {
      std::fill(grad_weight.data<T>(), grad_weight.data<T>() + grad_weight.numel(), T(0));
    } else if (g.depthwise()) {
      depthwise_backward_weight(g, grad_y.data<T>(), x.data<T>(), grad_weight.data<T>());
    } else if (batched(g)) {
      batched_backward_weight(g, x, grad_y.data<T>(), x.data<T>(), grad_weight.data<T>());
    } else {
      gemm_backward_weight(g, x, grad_y.data<T>(), x.data<T>(), grad_weight.data<T>());
    }
  });
}

void conv2d_backward_bias_cpu(const Tensor& grad_y, Tensor& grad_bias) {
  const int64_t n = grad_y.size(0), o = grad_y.size(1);
  const int64_t plane = grad_y.numel() / std::max<int64_t>(n * o, 1);
  dispatch_floating(grad_y.dtype(), "conv2d backward", [&](auto z) {
    using T = decltype(z);
    const T* gy = grad_y.data<T>();
    T* gb = grad_bias.data<T>();
    parallel_for(0, o, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t oc = lo; oc < hi; ++oc) {
        double acc = 0;
        for (int64_t s = 0; s < n; ++s) {
          const T* p = gy + (s * o + oc) * plane;
          acc += Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(p, plane).sum();
        }
        gb[oc] = static_cast<T>(acc);
      }
    });
  });
}

}  // namespace

GPIPE_ISA_KERNEL(conv2d_forward, conv2d_forward_cpu);
GPIPE_ISA_KERNEL(conv2d_backward_input, conv2d_backward_input_cpu);
GPIPE_ISA_KERNEL(conv2d_backward_weight, conv2d_backward_weight_cpu);
GPIPE_ISA_KERNEL(conv2d_backward_bias, conv2d_backward_bias_cpu);

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
