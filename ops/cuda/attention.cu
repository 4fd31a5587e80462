// Fused attention on CUDA, flash-style: no score or probability tensor.
//
// Note [Flash attention on CUDA]. ops::attention's CPU kernels save the
// probabilities [B heads, Tq, Tk] for backward; at Transformer sizes on a
// GPU, writing and re-reading them (and the composed form's permuted copies
// of q, k, v) costs more than the products. Here each thread owns one query
// row of one (example, head) pair and keeps its q, its output accumulator
// and the running max m and sum l of the online softmax in registers, while
// the block walks the keys in tiles staged in shared memory:
//   s_j = (q / sqrt(dh)) . k_j;  if s_j > m: l, o *= exp(m - s_j), m = s_j;
//   p_j = exp(s_j - m);  l += p_j;  o += p_j v_j
// and writes out = o / l and lse = m + log l, the log-sum-exp of the row (all
// that backward keeps besides q, k, v and the output). Masked keys (causal
// j > i, padded keys) are skipped: they would weigh exactly 0, as the -1e9
// of masked_fill gives them in the composed form (Note [Masked scores] in
// ops/attention.cc). A row that sees no key at all (every key padded)
// weighs all Tk keys uniformly there, so it does here: out = mean of v, and
// lse = -inf marks the row for backward.
//
// Backward recomputes p_ij = exp(s_ij - lse_i) and, with D_i = dout_i . out_i
// (= sum_j p_ij dp_ij), runs three kernels without atomics, so the result
// is deterministic:
//   queries: a thread per query: D_i, dq_i = scale sum_j p_ij (dp_ij - D_i) k_j
//            with dp_ij = dout_i . v_j;
//   dv:      a thread per key:  dv_j = sum_i p_ij dout_i;
//   dk:      a thread per key:  dk_j = sum_i p_ij (dp_ij - D_i) (scale q_i).
// A uniform row contributes dout_i / Tk (times the dropout factor, below)
// to every dv_j and nothing to dq or dk (masked_fill passes no gradient to
// masked scores).
//
// Dropout on the probabilities (Note [Attention dropout] in
// ops/attention.cc): the sum l and the log-sum-exp take p_ij undropped, the
// output o += p_ij f_ij v_j with f_ij the mask times 1 / (1 - p)
// (DropDraw in attention_mma.h draws it from Philox); backward draws f again:
// dp_ij becomes f_ij dp_ij, and dv_j takes p_ij f_ij.
//
// Heads are read in place in the [B, T, D] layout. Everything computes in
// compute_t<T> (float32 for 16-bit tensors, each output rounded once; float64
// for float64). The head width is padded with zeros to the template's kDim
// (16, 32, 64 or 128): zeros add nothing to the dot products and the padded output
// columns are never written. Wider heads use the composed form
// (kFlashAttentionMaxHeadDim in ops/attention_kernels.h).
#include "core/rng.h"
#include "ops/attention_kernels.h"
#include "ops/cuda/attention_mma.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/pending.h"

namespace gpipe::ops::cuda {
namespace {

constexpr int kRows = 128;  // threads per block: one query (or key) row each

// Rows of a shared-memory tile: 32 KB for the two tiles of kDim-wide rows.
template <class C, int kDim>
__host__ __device__ constexpr int tile_rows() {
  return 16384 / (kDim * static_cast<int>(sizeof(C)));
}

// Stages rows [r0, r0 + n) of a [rows, dh] head view (row r at base + r * d)
// as kDim-wide rows of C, zero-padded past dh and past the last row.
template <class T, class C, int kDim, int kTile>
__device__ void stage_rows(const T* x, int64_t base, int64_t r0, int64_t rows, const Geometry& g,
                           C* tile) {
  for (int e = threadIdx.x; e < kTile * kDim; e += kRows) {
    const int r = e / kDim, c = e % kDim;
    const int64_t row = r0 + r;
    tile[e] = row < rows && c < g.dh ? static_cast<C>(load(x, base + row * g.d + c)) : C(0);
  }
}

template <class T>
__device__ bool padded(const T* pad, int64_t b, int64_t j, int64_t tk) {
  return pad != nullptr && load(pad, b * tk + j) != 0;
}

template <class T, int kDim, class C = compute_t<T>>
__global__ void __launch_bounds__(kRows)
    forward_kernel(const T* q, const T* k, const T* v, const T* pad, T* out, C* lse, Geometry g) {
  constexpr int kTile = tile_rows<C, kDim>();
  __shared__ C ks[kTile * kDim];
  __shared__ C vs[kTile * kDim];
  __shared__ bool hidden[kTile];
  const int64_t bh = blockIdx.y, b = bh / g.heads;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRows + threadIdx.x;
  const bool active = i < g.tq;
  const int64_t kv0 = g.k_at(bh, 0);
  const C scale = static_cast<C>(g.scale);
  C qr[kDim], o[kDim];
#pragma unroll
  for (int c = 0; c < kDim; ++c) {
    qr[c] = active && c < g.dh ? static_cast<C>(load(q, g.q_at(bh, i) + c)) * scale : C(0);
    o[c] = 0;
  }
  C m = neg_infinity<C>(), l = 0;
  DropDraw drop;
  const int64_t last =
      (g.tq < (blockIdx.x + 1) * int64_t{kRows} ? g.tq : (blockIdx.x + 1) * kRows) - 1;
  const int64_t end = g.visible_end(last);
  const int64_t mine = active ? g.visible_end(i) : 0;
  for (int64_t j0 = 0; j0 < end; j0 += kTile) {
    __syncthreads();  // the previous tile's readers are done
    stage_rows<T, C, kDim, kTile>(k, kv0, j0, g.tk, g, ks);
    stage_rows<T, C, kDim, kTile>(v, kv0, j0, g.tk, g, vs);
    for (int r = threadIdx.x; r < kTile; r += kRows)
      hidden[r] = j0 + r < g.tk && padded(pad, b, j0 + r, g.tk);
    __syncthreads();
    const int n = static_cast<int>(mine - j0 < kTile ? mine - j0 : kTile);
    for (int r = 0; r < n; ++r) {
      if (hidden[r]) continue;
      const C* kr = ks + r * kDim;
      const C* vr = vs + r * kDim;
      C s = 0;
#pragma unroll
      for (int c = 0; c < kDim; ++c) s += qr[c] * kr[c];
      if (s > m) {
        const C a = dexp(m - s);
        l *= a;
#pragma unroll
        for (int c = 0; c < kDim; ++c) o[c] *= a;
        m = s;
      }
      const C p = dexp(s - m);
      l += p;
      const C kept = p * drop.factor<C>(g, bh, i, j0 + r);  // the sum l takes p undropped
#pragma unroll
      for (int c = 0; c < kDim; ++c) o[c] += kept * vr[c];
    }
  }
  if (!active) return;
  const int64_t at = g.q_at(bh, i);
  if (l > C(0)) {
    const C inv = C(1) / l;
#pragma unroll
    for (int c = 0; c < kDim; ++c)
      if (c < g.dh) store(out, at + c, o[c] * inv);
    lse[bh * g.tq + i] = m + dlog(l);
    return;
  }
  // No visible key: uniform weights over all Tk keys (dropped as any).
  for (int64_t c = 0; c < g.dh; ++c) {
    C acc = 0;
    DropDraw row;
    for (int64_t j = 0; j < g.tk; ++j)
      acc += static_cast<C>(load(v, kv0 + j * g.d + c)) * row.factor<C>(g, bh, i, j);
    store(out, at + c, acc / static_cast<C>(g.tk));
  }
  lse[bh * g.tq + i] = neg_infinity<C>();
}

// dq and D (a thread per query).
template <class T, int kDim, class C = compute_t<T>>
__global__ void __launch_bounds__(kRows)
    backward_queries_kernel(const T* q, const T* k, const T* v, const T* pad, const T* out,
                            const T* gout, const C* lse, C* dsum, T* gq, Geometry g) {
  constexpr int kTile = tile_rows<C, kDim>();
  __shared__ C ks[kTile * kDim];
  __shared__ C vs[kTile * kDim];
  __shared__ bool hidden[kTile];
  const int64_t bh = blockIdx.y, b = bh / g.heads;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRows + threadIdx.x;
  const bool active = i < g.tq;
  const int64_t at = active ? g.q_at(bh, i) : 0, kv0 = g.k_at(bh, 0);
  const C scale = static_cast<C>(g.scale);
  C qr[kDim], go[kDim], dq[kDim];
  C di = 0;
#pragma unroll
  for (int c = 0; c < kDim; ++c) {
    const bool in = active && c < g.dh;
    qr[c] = in ? static_cast<C>(load(q, at + c)) * scale : C(0);
    go[c] = in ? static_cast<C>(load(gout, at + c)) : C(0);
    if (in) di += go[c] * static_cast<C>(load(out, at + c));
    dq[c] = 0;
  }
  const C li = active ? lse[bh * g.tq + i] : neg_infinity<C>();
  if (active) dsum[bh * g.tq + i] = di;
  const int64_t last =
      (g.tq < (blockIdx.x + 1) * int64_t{kRows} ? g.tq : (blockIdx.x + 1) * kRows) - 1;
  const int64_t end = g.visible_end(last);
  // A uniform row (li = -inf) has no gradient for q.
  const int64_t mine = active && li != neg_infinity<C>() ? g.visible_end(i) : 0;
  DropDraw drop;
  for (int64_t j0 = 0; j0 < end; j0 += kTile) {
    __syncthreads();
    stage_rows<T, C, kDim, kTile>(k, kv0, j0, g.tk, g, ks);
    stage_rows<T, C, kDim, kTile>(v, kv0, j0, g.tk, g, vs);
    for (int r = threadIdx.x; r < kTile; r += kRows)
      hidden[r] = j0 + r < g.tk && padded(pad, b, j0 + r, g.tk);
    __syncthreads();
    const int n = static_cast<int>(mine - j0 < kTile ? mine - j0 : kTile);
    for (int r = 0; r < n; ++r) {
      if (hidden[r]) continue;
      const C* kr = ks + r * kDim;
      const C* vr = vs + r * kDim;
      C s = 0, dp = 0;
#pragma unroll
      for (int c = 0; c < kDim; ++c) {
        s += qr[c] * kr[c];
        dp += go[c] * vr[c];
      }
      // dP = mask * scale * (dout . v_j): Note [Attention dropout]
      const C ds = dexp(s - li) * (dp * drop.factor<C>(g, bh, i, j0 + r) - di);
#pragma unroll
      for (int c = 0; c < kDim; ++c) dq[c] += ds * kr[c];
    }
  }
  if (!active) return;
#pragma unroll
  for (int c = 0; c < kDim; ++c)
    if (c < g.dh) store(gq, at + c, dq[c] * scale);
}

// dv (kKeyGrad false) or dk (true): a thread per key, walking the queries in
// tiles of (scale q, dout, lse, D).
template <class T, int kDim, bool kKeyGrad, class C = compute_t<T>>
__global__ void __launch_bounds__(kRows)
    backward_keys_kernel(const T* q, const T* k, const T* v, const T* pad, const T* gout,
                         const C* lse, const C* dsum, T* grad, Geometry g) {
  constexpr int kTile = tile_rows<C, kDim>();
  __shared__ C qs[kTile * kDim];
  __shared__ C gs[kTile * kDim];
  __shared__ C ls[kTile];
  __shared__ C ds[kTile];
  __shared__ int any_uniform;
  const int64_t bh = blockIdx.y, b = bh / g.heads;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kRows + threadIdx.x;
  const bool active = j < g.tk;
  const int64_t at = active ? g.k_at(bh, j) : 0, q0 = g.q_at(bh, 0);
  const C scale = static_cast<C>(g.scale), inv_tk = C(1) / static_cast<C>(g.tk);
  const bool hidden = active && padded(pad, b, j, g.tk);
  C kr[kDim], vr[kDim], acc[kDim];
#pragma unroll
  for (int c = 0; c < kDim; ++c) {
    const bool in = active && c < g.dh;
    kr[c] = in ? static_cast<C>(load(k, at + c)) : C(0);
    vr[c] = in && kKeyGrad ? static_cast<C>(load(v, at + c)) : C(0);
    acc[c] = 0;
  }
  // Queries before the block's first key see none of its keys by causality;
  // only uniform rows among them matter (to dv).
  const int64_t first_key = static_cast<int64_t>(blockIdx.x) * kRows;
  for (int64_t i0 = 0; i0 < g.tq; i0 += kTile) {
    __syncthreads();
    if (threadIdx.x == 0) any_uniform = 0;
    __syncthreads();
    for (int r = threadIdx.x; r < kTile; r += kRows) {
      const bool in = i0 + r < g.tq;
      ls[r] = in ? lse[bh * g.tq + i0 + r] : C(0);
      ds[r] = in && kKeyGrad ? dsum[bh * g.tq + i0 + r] : C(0);
      if (in && ls[r] == neg_infinity<C>()) any_uniform = 1;
    }
    __syncthreads();
    const bool before = g.causal && i0 + kTile <= first_key;
    if (before && (kKeyGrad || !any_uniform)) continue;
    stage_rows<T, C, kDim, kTile>(q, q0, i0, g.tq, g, qs);
    stage_rows<T, C, kDim, kTile>(gout, q0, i0, g.tq, g, gs);
    __syncthreads();
    if (!active) continue;
    const int n = static_cast<int>(g.tq - i0 < kTile ? g.tq - i0 : kTile);
    for (int r = 0; r < n; ++r) {
      const C* gr = gs + r * kDim;
      // A column walks the rows Tk elements apart: a Philox block each.
      DropDraw drop;
      if (ls[r] == neg_infinity<C>()) {  // uniform row: 1 / Tk on every key, no score gradient
        if constexpr (!kKeyGrad) {
          const C w = inv_tk * drop.factor<C>(g, bh, i0 + r, j);
#pragma unroll
          for (int c = 0; c < kDim; ++c) acc[c] += w * gr[c];
        }
        continue;
      }
      if (hidden || (g.causal && j > i0 + r)) continue;
      const C* qr = qs + r * kDim;
      C s = 0;
#pragma unroll
      for (int c = 0; c < kDim; ++c) s += qr[c] * kr[c];
      s *= scale;
      const C p = dexp(s - ls[r]);
      if constexpr (kKeyGrad) {
        C dp = 0;
#pragma unroll
        for (int c = 0; c < kDim; ++c) dp += gr[c] * vr[c];
        const C w = p * (dp * drop.factor<C>(g, bh, i0 + r, j) - ds[r]) * scale;
#pragma unroll
        for (int c = 0; c < kDim; ++c) acc[c] += w * qr[c];
      } else {
        const C w = p * drop.factor<C>(g, bh, i0 + r, j);
#pragma unroll
        for (int c = 0; c < kDim; ++c) acc[c] += w * gr[c];
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int c = 0; c < kDim; ++c)
    if (c < g.dh) store(grad, at + c, acc[c]);
}

Geometry geometry(const Tensor& q, const Tensor& k, int64_t heads, bool causal, double p,
                  uint64_t key) {
  Geometry g{};
  g.b = q.size(0);
  g.tq = q.size(1);
  g.tk = k.size(1);
  g.d = q.size(2);
  g.heads = heads;
  g.dh = g.d / heads;
  g.scale = 1.0 / std::sqrt(static_cast<double>(g.dh));
  g.causal = causal;
  if (p > 0) {
    g.drop_scale = 1.0 / (1.0 - p);
    g.drop_threshold = dropout_keep_threshold(p);
    g.drop_key = key;
  }
  return g;
}

// Calls f(std::integral_constant<int, kDim>) with the narrowest kDim >= dh.
template <class F>
void dispatch_head_dim(int64_t dh, F&& f) {
  GPIPE_CHECK(dh >= 1 && dh <= kFlashAttentionMaxHeadDim, "attention: head width ", dh,
              " is outside the fused CUDA kernel's 1..", kFlashAttentionMaxHeadDim);
  with_head_width(dh, std::forward<F>(f));
}

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

dim3 grid(int64_t rows, int64_t pairs) {
  GPIPE_CHECK(pairs <= 65535, "attention: ", pairs,
              " (example, head) pairs exceed the fused CUDA kernel's grid (65535)");
  return dim3(static_cast<unsigned>((rows + kRows - 1) / kRows), static_cast<unsigned>(pairs));
}

// Dropout in these kernels has not yet run on a GPU: pending (Note [Pending CUDA kernels] in
// ops/cuda/pending.h), the composed form without the switch.
bool takes_cuda(int64_t dh, bool dropout) {
  return dh >= 1 && dh <= kFlashAttentionMaxHeadDim && (!dropout || pending_kernels());
}

void forward_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad,
                  int64_t heads, bool causal, double p, uint64_t key, Tensor& out, Tensor& lse) {
  const Geometry g = geometry(q, k, heads, causal, p, key);
  if (g.tq == 0 || g.b == 0) return;
  if (mma_attention_forward(q, k, v, pad, g, out, lse))
    return;  // Note [Tensor-core flash attention]
  KernelScope scope(out.device());
  dispatch_float_like(q.dtype(), "attention", [&](auto z) {
    using T = decltype(z);
    using C = compute_t<T>;
    dispatch_head_dim(g.dh, [&](auto dim) {
      forward_kernel<T, decltype(dim)::value>
          <<<grid(g.tq, g.b * heads), kRows, 0, scope.stream()>>>(q.data<T>(), k.data<T>(),
                                                                  v.data<T>(), data_or_null<T>(pad),
                                                                  out.data<T>(), lse.data<C>(), g);
    });
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

void backward_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad,
                   const Tensor& out, const Tensor& lse, const Tensor& gout, int64_t heads,
                   bool causal, double p, uint64_t key, Tensor& gq, Tensor& gk, Tensor& gv) {
  const Geometry g = geometry(q, k, heads, causal, p, key);
  if (g.b == 0) return;
  KernelScope scope(gq.device());
  if (g.tq == 0) {  // no query: the keys and values get no gradient
    GPIPE_CUDA_CHECK(cudaMemsetAsync(gk.raw_data(), 0, gk.nbytes(), scope.stream()));
    GPIPE_CUDA_CHECK(cudaMemsetAsync(gv.raw_data(), 0, gv.nbytes(), scope.stream()));
    return;
  }
  if (mma_attention_backward(q, k, v, pad, out, lse, gout, g, gq, gk, gv)) return;
  dispatch_float_like(q.dtype(), "attention backward", [&](auto z) {
    using T = decltype(z);
    using C = compute_t<T>;
    const Tensor dsum = workspace(g.b * heads * g.tq, lse.dtype(), q.device());
    const T* pq = q.data<T>();
    const T* pk = k.data<T>();
    const T* pv = v.data<T>();
    const T* pp = data_or_null<T>(pad);
    dispatch_head_dim(g.dh, [&](auto dim) {
      constexpr int kDim = decltype(dim)::value;
      backward_queries_kernel<T, kDim><<<grid(g.tq, g.b * heads), kRows, 0, scope.stream()>>>(
          pq, pk, pv, pp, out.data<T>(), gout.data<T>(), lse.data<C>(), dsum.data<C>(),
          gq.data<T>(), g);
      backward_keys_kernel<T, kDim, false><<<grid(g.tk, g.b * heads), kRows, 0, scope.stream()>>>(
          pq, pk, pv, pp, gout.data<T>(), lse.data<C>(), dsum.data<C>(), gv.data<T>(), g);
      backward_keys_kernel<T, kDim, true><<<grid(g.tk, g.b * heads), kRows, 0, scope.stream()>>>(
          pq, pk, pv, pp, gout.data<T>(), lse.data<C>(), dsum.data<C>(), gk.data<T>(), g);
    });
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

}  // namespace

GPIPE_REGISTER_KERNEL(flash_attention_takes, DeviceType::kCUDA, takes_cuda);
GPIPE_REGISTER_KERNEL(flash_attention_forward, DeviceType::kCUDA, forward_cuda);
GPIPE_REGISTER_KERNEL(flash_attention_backward, DeviceType::kCUDA, backward_cuda);
GPIPE_KERNEL_ACCEPTS_16BIT(flash_attention_forward, DeviceType::kCUDA, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(flash_attention_backward, DeviceType::kCUDA, kBoth);

}  // namespace gpipe::ops::cuda
