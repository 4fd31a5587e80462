// Tensor-core flash attention for 16-bit q, k, v: the block bodies, written
// once for the GPU and for a CPU emulation of it.
//
// Note [Tensor-core flash attention]. The flash kernels of Note [Flash
// attention on CUDA] (ops/cuda/attention.cu) give each thread one query or
// key row and do every multiply-add on the CUDA cores, reading shared
// memory: on an H200 about 2.7 TFLOP/s, 42% of a T6 bf16 step. For bfloat16
// and float16 heads these kernels do the products on tensor cores instead
// (WMMA, 16 x 16 x 16 tiles, float32 sums), FlashAttention-2's scheme:
//
//   forward, a block per (64 queries, example and head): for each tile of 64
//     keys, S = Q K^T (tensor cores, into shared memory), the online-softmax
//     update of each row's max m and sum l by the threads (two per row), the
//     row's output accumulator O (float32, shared memory) scaled by
//     exp(m_old - m_new), then O += P V (tensor cores; P rounded to the
//     16-bit type). out = O / l, lse = m + log l.
//   dq, a block per 64 queries: D_i = dout_i . out_i; per tile of 64 keys,
//     S = Q K^T and dP = dO V^T, dS = P (dP - D) (16-bit), dQ += dS K in
//     tensor-core accumulators that stay in registers across the tiles.
//   dk and dv, a block per 64 keys: per tile of 64 queries, S^T = K Q^T and
//     dP^T = V dO^T, then dV += P^T dO and dK += dS^T Q, in registers.
//
// The masks, the uniform rows (a row that sees no key: out = mean of v, lse
// = -inf, dv gets dout / Tk on every key, q and k nothing), the scale and
// the determinism (no atomics; sums in a fixed order) are those of the
// CUDA-core kernels; the difference is that P and dS are rounded to the
// 16-bit type before their products, as FlashAttention does, where the
// CUDA-core kernels keep them in float32.
//
// Each body is a sequence of phases separated by barriers: `x.threads(f)`
// runs f(t) for every thread t of the block, `x.warps(f)` runs f(w) for
// every warp (its tensor-core tile operations are warp-collective),
// `x.sync()` is the block barrier and `x.warp_sync()` the warp's (Note
// [Warp-local phases]). On the GPU (DeviceExec, in ops/cuda/attention_mma.cu)
// f runs once in each thread or warp; the CPU's HostExec
// (tests/ops/attention_mma_test.cc) runs the same bodies one thread after
// another, in both orders, with the tile operations as plain loops and shared
// memory poisoned with NaNs, so the indexing, masking and softmax logic is
// tested against the CPU's attention on machines without a GPU. A thread
// keeps nothing in its own variables from one phase to the next: what
// persists lives in shared memory, or in per-warp accumulators
// (X::WarpLocal). Shared-memory rows are padded (16-bit rows by 8
// elements, float rows by 4) so every tile starts on 32 bytes, as WMMA
// requires, and the tile loads spread over the banks. Where dh, d and the
// tensors' addresses allow (Geometry::vec8), rows are staged 16 bytes at a
// time.
//
// Note [Warp-local phases]. Warp w's tensor-core tiles are the block's rows
// [16w, 16w + 16), and in the threads' phases between the products thread t
// works on row t / 2, one of its own warp's rows (its partner t ^ 1 holds
// the other half of the row). So from the S (or S^T) products to the
// products that consume P and dS, a phase reads only what its own warp
// wrote, and a warp barrier separates them; block barriers remain where
// all threads stage tiles every warp reads, and where the results pass
// through `o`, which overlays other warps' rows.
//
// Dropout (Note [Attention dropout] in ops/attention.cc): the P tile the
// forward multiplies with V is dropped (the sum l is not); dq's and dk's dS
// take the dropped dP, dv's P^T is dropped; each thread draws its elements'
// factors with DropDraw.
//
// Rounding dS to float16 can overflow past 65504 (or lose values under
// 2^-24) where the CUDA-core kernels keep it in float32; that is the price of
// FlashAttention's scheme in float16 (bfloat16 has float32's range).
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/dtype.h"
#include "core/philox.h"

#ifdef __CUDACC__
#define GPIPE_HD __host__ __device__
#define GPIPE_HD_CHECK_OFF _Pragma("nv_exec_check_disable")
#define GPIPE_UNROLL _Pragma("unroll")
#define GPIPE_NO_UNROLL _Pragma("unroll 1")
#else
#define GPIPE_HD
#define GPIPE_HD_CHECK_OFF
#define GPIPE_UNROLL
#define GPIPE_NO_UNROLL
#endif

namespace gpipe {
class Tensor;
}

namespace gpipe::ops::cuda {

// One fused attention problem: q [b, tq, d], k and v [b, tk, d], `heads`
// heads of width dh = d / heads read in place.
struct Geometry {
  int64_t b, tq, tk, d, heads, dh;
  double scale;
  bool causal;
  // The tensor-core kernels may stage rows 8 elements (16 bytes) at a time:
  // dh and d are multiples of 8 and every tensor they read starts on 16
  // bytes (set by their launcher; the CUDA-core kernels ignore it).
  bool vec8 = false;
  GPIPE_HD int64_t q_at(int64_t bh, int64_t i) const {
    return ((bh / heads) * tq + i) * d + (bh % heads) * dh;
  }
  GPIPE_HD int64_t k_at(int64_t bh, int64_t j) const {
    return ((bh / heads) * tk + j) * d + (bh % heads) * dh;
  }
  // Keys row i sees by causality: [0, visible_end(i)).
  GPIPE_HD int64_t visible_end(int64_t i) const { return causal ? (i + 1 < tk ? i + 1 : tk) : tk; }
  // Dropout on the probabilities (Note [Attention dropout] in
  // ops/attention.cc): drop_scale 1 / (1 - p), 0 without dropout;
  // probability (bh, i, j) is kept where element (bh tq + i) tk + j of the
  // float32 Philox stream drop_key is >= drop_threshold.
  double drop_scale = 0;
  float drop_threshold = 0;
  uint64_t drop_key = 0;
  GPIPE_HD bool dropping() const { return drop_scale > 0; }
};

// The dropout factors of one thread's probabilities (Geometry's dropout):
// drop_scale where kept, 0 where dropped, 1 without dropout. Keeps the last
// Philox block, so a row walked in key order draws one block per 4 keys.
struct DropDraw {
  uint64_t block = ~uint64_t{0};
  philox::Block words{};
  template <class C>
  GPIPE_HD C factor(const Geometry& g, int64_t bh, int64_t i, int64_t j) {
    if (!g.dropping()) return C(1);
    const uint64_t e = (static_cast<uint64_t>(bh) * g.tq + i) * g.tk + j;
    if (e / 4 != block) {
      block = e / 4;
      words = philox::block_at(g.drop_key, block);
    }
    return philox::to_unit_float(words.w[e % 4]) >= g.drop_threshold ? static_cast<C>(g.drop_scale)
                                                                     : C(0);
  }
};

// Calls f(std::integral_constant<int, kDim>) with the narrowest of the
// kernels' head widths 16, 32, 64, 128 that holds dh (1..128): every flash
// kernel, CUDA-core or tensor-core, pads its heads to one of them.
template <class F>
decltype(auto) with_head_width(int64_t dh, F&& f) {
  if (dh <= 16) return f(std::integral_constant<int, 16>{});
  if (dh <= 32) return f(std::integral_constant<int, 32>{});
  if (dh <= 64) return f(std::integral_constant<int, 64>{});
  return f(std::integral_constant<int, 128>{});
}

// ops/cuda/attention_mma.cu: the tensor-core kernels for 16-bit q, k, v
// when they are switched on (GPIPE_CUDA_PENDING=1) and fit the device; false
// when they did not run (the caller runs the CUDA-core kernels).
bool mma_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad,
                           const Geometry& g, Tensor& out, Tensor& lse);
bool mma_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad,
                            const Tensor& out, const Tensor& lse, const Tensor& gout,
                            const Geometry& g, Tensor& gq, Tensor& gk, Tensor& gv);

namespace mma {

inline constexpr int kWarps = 4;
inline constexpr int kThreads = 32 * kWarps;
inline constexpr int kRows = 16 * kWarps;  // a block's own rows (queries or keys), 16 per warp
inline constexpr int kTile = 64;           // the other side's rows per step
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

template <int kDim>
struct Layout {
  static_assert(kDim % 16 == 0, "head tiles are whole 16-wide tensor-core tiles");
  static constexpr int kLdH = kDim + 8;   // 16-bit [rows, kDim]
  static constexpr int kLdP = kTile + 8;  // 16-bit [kRows, kTile]
  static constexpr int kLdS = kTile + 4;  // float [kRows, kTile]
  static constexpr int kLdO = kDim + 4;   // float [kRows, kDim]
};

template <int kDim>
struct ForwardSmem {
  using L = Layout<kDim>;
  alignas(128) uint16_t q[kRows * L::kLdH];
  alignas(128) uint16_t k[kTile * L::kLdH];
  alignas(128) uint16_t v[kTile * L::kLdH];
  alignas(128) uint16_t p[kRows * L::kLdP];
  alignas(128) float s[kRows * L::kLdS];
  alignas(128) float o[kRows * L::kLdO];
  float m[kRows], l[kRows], alpha[kRows], red[kThreads], red2[kThreads];
  unsigned char hidden[kTile];
};

// Stages rows [r0, r0 + n) of one head (row r at base + r * d) as the bits
// of kDim-wide rows, zero past dh and past the last row: 16 bytes per copy
// where g.vec8 allows (a chunk of 8 is then wholly inside dh or outside).
GPIPE_HD_CHECK_OFF
template <int kDim, class X, class T>
GPIPE_HD void stage(int t, const T* x, int64_t base, int64_t r0, int64_t rows, int n,
                    const Geometry& g, uint16_t* tile) {
  constexpr int kLd = Layout<kDim>::kLdH;
  if (g.vec8) {
    constexpr int kChunks = kDim / 8;
    for (int e = t; e < n * kChunks; e += kThreads) {
      const int r = e / kChunks, c = (e % kChunks) * 8;
      const int64_t row = r0 + r;
      if (row < rows && c < g.dh)
        X::copy8(tile + r * kLd + c, &x[base + row * g.d + c].bits);
      else
        X::zero8(tile + r * kLd + c);
    }
    return;
  }
  for (int e = t; e < n * kDim; e += kThreads) {
    const int r = e / kDim, c = e % kDim;
    const int64_t row = r0 + r;
    tile[r * kLd + c] = row < rows && c < g.dh ? x[base + row * g.d + c].bits : uint16_t{0};
  }
}

// Stages the key and value tiles [j0, j0 + kTile) and marks the keys no
// row may see (past Tk, or padded).
GPIPE_HD_CHECK_OFF
template <int kDim, class X, class T>
GPIPE_HD void stage_keys(int t, const T* k, const T* v, const T* pad, int64_t b, int64_t kv0,
                         int64_t j0, const Geometry& g, uint16_t* ks, uint16_t* vs,
                         unsigned char* hidden) {
  stage<kDim, X>(t, k, kv0, j0, g.tk, kTile, g, ks);
  stage<kDim, X>(t, v, kv0, j0, g.tk, kTile, g, vs);
  for (int r = t; r < kTile; r += kThreads) {
    const int64_t j = j0 + r;
    hidden[r] =
        j >= g.tk || (pad != nullptr && X::template value<T>(pad[b * g.tk + j].bits) != 0.0f);
  }
}

// Tile products of one warp: C (16 x 16 float) += A B over kSteps 16-deep
// steps, A 16 x (16 kSteps) row-major, B row-major or, with kBT, given as
// B^T row-major (16 x (16 kSteps)).
GPIPE_HD_CHECK_OFF
template <class X, class T, bool kBT, int kSteps>
GPIPE_HD void tile_product(typename X::Acc& c, const uint16_t* a, int lda, const uint16_t* b,
                           int ldb) {
  GPIPE_UNROLL
  for (int kk = 0; kk < kSteps; ++kk) {
    if constexpr (kBT)
      X::template mma_abt<T>(c, a + 16 * kk, lda, b + 16 * kk, ldb);
    else
      X::template mma_ab<T>(c, a + 16 * kk, lda, b + 16 * kk * ldb, ldb);
  }
}

// Forward: queries [i0, i0 + kRows) of pair bh.
GPIPE_HD_CHECK_OFF
template <class X, class T, int kDim>
GPIPE_HD void forward_block(X& x, ForwardSmem<kDim>& sm, const T* q, const T* k, const T* v,
                            const T* pad, T* out, float* lse, const Geometry& g, int64_t block,
                            int64_t bh) {
  using L = Layout<kDim>;
  const int64_t b = bh / g.heads, i0 = block * kRows;
  const int64_t q0 = g.q_at(bh, 0), kv0 = g.k_at(bh, 0);
  const float scale = static_cast<float>(g.scale);
  x.threads([&](int t) {
    stage<kDim, X>(t, q, q0, i0, g.tq, kRows, g, sm.q);
    for (int e = t; e < kRows * kDim; e += kThreads) sm.o[(e / kDim) * L::kLdO + e % kDim] = 0.0f;
    if (t < kRows) {
      sm.m[t] = kNegInf;
      sm.l[t] = 0.0f;
    }
  });
  const int64_t last = (g.tq < i0 + kRows ? g.tq : i0 + kRows) - 1;
  const int64_t end = g.visible_end(last);
  for (int64_t j0 = 0; j0 < end; j0 += kTile) {
    x.sync();  // the previous tile's readers are done
    x.threads(
        [&](int t) { stage_keys<kDim, X>(t, k, v, pad, b, kv0, j0, g, sm.k, sm.v, sm.hidden); });
    x.sync();
    x.warps([&](int w) {  // S = Q K^T
      for (int n = 0; n < kTile / 16; ++n) {
        typename X::Acc acc;
        X::zero(acc);
        tile_product<X, T, true, kDim / 16>(acc, sm.q + 16 * w * L::kLdH, L::kLdH,
                                            sm.k + 16 * n * L::kLdH, L::kLdH);
        X::store(sm.s + 16 * w * L::kLdS + 16 * n, L::kLdS, acc);
      }
    });
    x.warp_sync();          // Note [Warp-local phases]
    x.threads([&](int t) {  // scaled scores, -inf where masked; each half row's max
      const int r = t >> 1, h = t & 1;
      const int64_t i = i0 + r;
      const int64_t vis = i < g.tq ? g.visible_end(i) - j0 : 0;
      float mx = kNegInf;
      for (int c = h; c < kTile; c += 2) {
        float& s = sm.s[r * L::kLdS + c];
        s = c < vis && !sm.hidden[c] ? s * scale : kNegInf;
        mx = s > mx ? s : mx;
      }
      sm.red[t] = mx;
    });
    x.warp_sync();
    x.threads([&](int t) {  // P = exp(S - m_new) in 16 bits, each half row's sum
      const int r = t >> 1, h = t & 1;
      const float m_old = sm.m[r];
      const float tile_max = sm.red[2 * r] > sm.red[2 * r + 1] ? sm.red[2 * r] : sm.red[2 * r + 1];
      const float m_new = tile_max > m_old ? tile_max : m_old;
      float sum = 0.0f;
      DropDraw drop;  // the sum l takes p undropped, the product with V dropped
      for (int c = h; c < kTile; c += 2) {
        const float s = sm.s[r * L::kLdS + c];
        const float p = s == kNegInf ? 0.0f : X::exp(s - m_new);
        const float kept = p == 0.0f ? 0.0f : p * drop.factor<float>(g, bh, i0 + r, j0 + c);
        sm.p[r * L::kLdP + c] = X::template bits<T>(kept);
        sum += p;
      }
      sm.red2[t] = sum;
      if (h == 0) sm.alpha[r] = m_old == kNegInf ? 0.0f : X::exp(m_old - m_new);
    });
    x.warp_sync();
    x.threads([&](int t) {  // rescale O and l; the new max
      const int r = t >> 1, h = t & 1;
      const float a = sm.alpha[r];
      for (int c = h; c < kDim; c += 2) sm.o[r * L::kLdO + c] *= a;
      if (h == 0) {
        sm.l[r] = sm.l[r] * a + sm.red2[2 * r] + sm.red2[2 * r + 1];
        const float tile_max =
            sm.red[2 * r] > sm.red[2 * r + 1] ? sm.red[2 * r] : sm.red[2 * r + 1];
        sm.m[r] = tile_max > sm.m[r] ? tile_max : sm.m[r];
      }
    });
    x.warp_sync();
    x.warps([&](int w) {  // O += P V
      for (int n = 0; n < kDim / 16; ++n) {
        typename X::Acc acc;
        float* o = sm.o + 16 * w * L::kLdO + 16 * n;
        X::load(acc, o, L::kLdO);
        tile_product<X, T, false, kTile / 16>(acc, sm.p + 16 * w * L::kLdP, L::kLdP, sm.v + 16 * n,
                                              L::kLdH);
        X::store(o, L::kLdO, acc);
      }
    });
  }
  x.sync();
  x.threads([&](int t) {
    const int r = t >> 1, h = t & 1;
    const int64_t i = i0 + r;
    if (i >= g.tq) return;
    const int64_t at = g.q_at(bh, i);
    const float l = sm.l[r];
    if (l > 0.0f) {
      const float inv = 1.0f / l;
      for (int c = h; c < g.dh; c += 2)
        out[at + c].bits = X::template bits<T>(sm.o[r * L::kLdO + c] * inv);
      if (h == 0) lse[bh * g.tq + i] = sm.m[r] + X::log(l);
      return;
    }
    // No visible key: uniform weights over all Tk keys (dropped as any).
    for (int c = h; c < g.dh; c += 2) {
      float acc = 0.0f;
      DropDraw drop;
      for (int64_t j = 0; j < g.tk; ++j)
        acc += X::template value<T>(v[kv0 + j * g.d + c].bits) * drop.factor<float>(g, bh, i, j);
      out[at + c].bits = X::template bits<T>(acc / static_cast<float>(g.tk));
    }
    if (h == 0) lse[bh * g.tq + i] = kNegInf;
  });
}

}  // namespace mma
}  // namespace gpipe::ops::cuda
