// The backward bodies of Note [Tensor-core flash attention] (ops/cuda/attention_mma.h):
// dq with D = rowsum(dout * out), then dk and dv.
#pragma once

#include "ops/cuda/attention_mma.h"

namespace gpipe::ops::cuda::mma {

// dq (a block of queries, tiles of keys) and dk/dv (a block of keys, tiles
// of queries) share one layout: `own` and `own2` are the block's rows (q
// and dout, or k and v), `t1` and `t2` the tile's; s and dp hold S and dP
// (or their transposes), their 16-bit products p and ds. The float32
// results are staged through `o`, which overlays s and dp (free by then).
template <int kDim>
struct BackwardSmem {
  using L = Layout<kDim>;
  static_assert(kRows * L::kLdO <= 2 * kRows * L::kLdS, "o overlays s and dp");
  alignas(128) uint16_t own[kRows * L::kLdH];
  alignas(128) uint16_t own2[kRows * L::kLdH];
  alignas(128) uint16_t t1[kTile * L::kLdH];
  alignas(128) uint16_t t2[kTile * L::kLdH];
  alignas(128) uint16_t p[kRows * L::kLdP];
  alignas(128) uint16_t ds[kRows * L::kLdP];
  union alignas(128) {
    struct {
      float s[kRows * L::kLdS];
      float dp[kRows * L::kLdS];
    } sd;
    float o[kRows * L::kLdO];
  } f;
  float lse[kTile], dsum[kTile], own_lse[kRows], own_dsum[kRows], red[kThreads];
  unsigned char hidden[kTile];
};

// A warp-accumulated [kRows, kDim] result through `o` into the block's rows
// [r0, r0 + kRows) of dst (row r from at(r), those under `rows`), times f.
GPIPE_HD_CHECK_OFF
template <class X, int kDim, class Acc, class T, class At>
GPIPE_HD void emit_rows(X& x, BackwardSmem<kDim>& sm, Acc& acc, T* dst, int64_t r0, int64_t rows,
                        float f, const Geometry& g, At at) {
  using L = Layout<kDim>;
  x.sync();  // o overlays rows of s and dp other warps may still read
  x.warps([&](int w) {
    GPIPE_UNROLL
    for (int n = 0; n < kDim / 16; ++n)
      X::store(sm.f.o + 16 * w * L::kLdO + 16 * n, L::kLdO, acc.get(w)[n]);
  });
  x.sync();
  x.threads([&](int t) {
    const int r = t >> 1, h = t & 1;
    if (r0 + r >= rows) return;
    const int64_t base = at(r0 + r);
    for (int c = h; c < g.dh; c += 2)
      dst[base + c].bits = X::template bits<T>(sm.f.o[r * L::kLdO + c] * f);
  });
}

// s = own t1^T and dp = own2 t2^T, each warp its own 16 rows: S and dP in
// dq's block (own = Q, dO; t = K, V), S^T and dP^T in dk/dv's (own = K, V;
// t = Q, dO).
GPIPE_HD_CHECK_OFF
template <class X, class T, int kDim>
GPIPE_HD void both_products(X& x, BackwardSmem<kDim>& sm) {
  using L = Layout<kDim>;
  x.warps([&](int w) {
    for (int n = 0; n < kTile / 16; ++n) {
      typename X::Acc acc;
      X::zero(acc);
      tile_product<X, T, true, kDim / 16>(acc, sm.own + 16 * w * L::kLdH, L::kLdH,
                                          sm.t1 + 16 * n * L::kLdH, L::kLdH);
      X::store(sm.f.sd.s + 16 * w * L::kLdS + 16 * n, L::kLdS, acc);
      X::zero(acc);
      tile_product<X, T, true, kDim / 16>(acc, sm.own2 + 16 * w * L::kLdH, L::kLdH,
                                          sm.t2 + 16 * n * L::kLdH, L::kLdH);
      X::store(sm.f.sd.dp + 16 * w * L::kLdS + 16 * n, L::kLdS, acc);
    }
  });
}

// dq and D = rowsum(dout * out): queries [i0, i0 + kRows) of pair bh.
GPIPE_HD_CHECK_OFF
template <class X, class T, int kDim>
GPIPE_HD void backward_queries_block(X& x, BackwardSmem<kDim>& sm, const T* q, const T* k,
                                     const T* v, const T* pad, const T* out, const T* gout,
                                     const float* lse, float* dsum, T* gq, const Geometry& g,
                                     int64_t block, int64_t bh) {
  using L = Layout<kDim>;
  constexpr int kN = kDim / 16;
  const int64_t b = bh / g.heads, i0 = block * kRows;
  const int64_t q0 = g.q_at(bh, 0), kv0 = g.k_at(bh, 0);
  const float scale = static_cast<float>(g.scale);
  typename X::template WarpLocal<kN> dq;
  x.warps([&](int w) {
    GPIPE_UNROLL
    for (int n = 0; n < kN; ++n) X::zero(dq.get(w)[n]);
  });
  x.threads([&](int t) {
    stage<kDim, X>(t, q, q0, i0, g.tq, kRows, g, sm.own);
    stage<kDim, X>(t, gout, q0, i0, g.tq, kRows, g, sm.own2);
    const int r = t >> 1, h = t & 1;
    const int64_t i = i0 + r;
    float d = 0.0f;
    if (i < g.tq) {
      const int64_t at = g.q_at(bh, i);
      for (int c = h; c < g.dh; c += 2)
        d += X::template value<T>(gout[at + c].bits) * X::template value<T>(out[at + c].bits);
    }
    sm.red[t] = d;
    if (h == 0) sm.own_lse[r] = i < g.tq ? lse[bh * g.tq + i] : kNegInf;
  });
  x.sync();
  x.threads([&](int t) {
    if (t >= kRows) return;
    const int64_t i = i0 + t;
    sm.own_dsum[t] = sm.red[2 * t] + sm.red[2 * t + 1];
    if (i < g.tq) dsum[bh * g.tq + i] = sm.own_dsum[t];
  });
  const int64_t last = (g.tq < i0 + kRows ? g.tq : i0 + kRows) - 1;
  const int64_t end = g.visible_end(last);
  for (int64_t j0 = 0; j0 < end; j0 += kTile) {
    x.sync();
    x.threads(
        [&](int t) { stage_keys<kDim, X>(t, k, v, pad, b, kv0, j0, g, sm.t1, sm.t2, sm.hidden); });
    x.sync();
    both_products<X, T>(x, sm);  // S = Q K^T, dP = dO V^T
    x.warp_sync();               // Note [Warp-local phases] in attention_mma.h
    x.threads([&](int t) {       // dS = P (dP - D); a uniform row (lse -inf) has none
      const int r = t >> 1, h = t & 1;
      const int64_t i = i0 + r;
      const float li = sm.own_lse[r], di = sm.own_dsum[r];
      const int64_t vis = i < g.tq && li != kNegInf ? g.visible_end(i) - j0 : 0;
      DropDraw drop;  // dP = mask * scale * (dO V^T): Note [Attention dropout]
      for (int c = h; c < kTile; c += 2) {
        float ds = 0.0f;
        if (c < vis && !sm.hidden[c]) {
          const float p = X::exp(sm.f.sd.s[r * L::kLdS + c] * scale - li);
          ds = p * (sm.f.sd.dp[r * L::kLdS + c] * drop.factor<float>(g, bh, i, j0 + c) - di);
        }
        sm.ds[r * L::kLdP + c] = X::template bits<T>(ds);
      }
    });
    x.warp_sync();
    x.warps([&](int w) {  // dQ += dS K (kk outermost: each dS tile loaded once)
      GPIPE_NO_UNROLL
      for (int kk = 0; kk < kTile / 16; ++kk) {
        GPIPE_UNROLL
        for (int n = 0; n < kN; ++n)
          X::template mma_ab<T>(dq.get(w)[n], sm.ds + 16 * w * L::kLdP + 16 * kk, L::kLdP,
                                sm.t1 + 16 * kk * L::kLdH + 16 * n, L::kLdH);
      }
    });
  }
  emit_rows<X, kDim>(x, sm, dq, gq, i0, g.tq, scale, g, [&](int64_t i) { return g.q_at(bh, i); });
}

// dk and dv: keys [j0, j0 + kRows) of pair bh. Runs after
// backward_queries_block has written D (dsum) for every query.
GPIPE_HD_CHECK_OFF
template <class X, class T, int kDim>
GPIPE_HD void backward_keys_block(X& x, BackwardSmem<kDim>& sm, const T* q, const T* k, const T* v,
                                  const T* pad, const T* gout, const float* lse, const float* dsum,
                                  T* gk, T* gv, const Geometry& g, int64_t block, int64_t bh) {
  using L = Layout<kDim>;
  constexpr int kN = kDim / 16;
  const int64_t b = bh / g.heads, j0 = block * kRows;
  const int64_t q0 = g.q_at(bh, 0), kv0 = g.k_at(bh, 0);
  const float scale = static_cast<float>(g.scale);
  const float inv_tk = 1.0f / static_cast<float>(g.tk);
  typename X::template WarpLocal<kN> dk, dv;
  x.warps([&](int w) {
    GPIPE_UNROLL
    for (int n = 0; n < kN; ++n) {
      X::zero(dk.get(w)[n]);
      X::zero(dv.get(w)[n]);
    }
  });
  x.threads([&](int t) {
    stage<kDim, X>(t, k, kv0, j0, g.tk, kRows, g, sm.own);
    stage<kDim, X>(t, v, kv0, j0, g.tk, kRows, g, sm.own2);
    for (int r = t; r < kRows; r += kThreads) {
      const int64_t j = j0 + r;
      sm.hidden[r] =
          j >= g.tk || (pad != nullptr && X::template value<T>(pad[b * g.tk + j].bits) != 0.0f);
    }
  });
  for (int64_t i0 = 0; i0 < g.tq; i0 += kTile) {
    x.sync();
    x.threads([&](int t) {
      if (t >= kTile) return;
      const int64_t i = i0 + t;
      sm.lse[t] = i < g.tq ? lse[bh * g.tq + i] : 0.0f;
      sm.dsum[t] = i < g.tq ? dsum[bh * g.tq + i] : 0.0f;
    });
    x.sync();
    // Queries before the block's first key see none of its keys by
    // causality; only uniform rows among them matter (to dv). Every thread
    // reads the same shared values, so all take the same branch.
    if (g.causal && i0 + kTile <= j0) {
      bool uniform = false;
      for (int c = 0; c < kTile; ++c) uniform = uniform || (i0 + c < g.tq && sm.lse[c] == kNegInf);
      if (!uniform) continue;
    }
    x.threads([&](int t) {
      stage<kDim, X>(t, q, q0, i0, g.tq, kTile, g, sm.t1);
      stage<kDim, X>(t, gout, q0, i0, g.tq, kTile, g, sm.t2);
    });
    x.sync();
    both_products<X, T>(x, sm);  // S^T = K Q^T, dP^T = V dO^T
    x.warp_sync();               // Note [Warp-local phases] in attention_mma.h
    x.threads([&](int t) {       // P^T and dS^T; a uniform query row weighs every key 1 / Tk
      const int r = t >> 1, h = t & 1;
      const int64_t j = j0 + r;
      const bool key = j < g.tk, seen = key && !sm.hidden[r];
      DropDraw drop;  // P^T dropped for dV; dS^T from P and the dropped dP
      for (int c = h; c < kTile; c += 2) {
        const int64_t i = i0 + c;
        float p = 0.0f, ds = 0.0f;
        if (i < g.tq && sm.lse[c] == kNegInf) {
          p = key ? inv_tk * drop.factor<float>(g, bh, i, j) : 0.0f;
        } else if (i < g.tq && seen && !(g.causal && j > i)) {
          p = X::exp(sm.f.sd.s[r * L::kLdS + c] * scale - sm.lse[c]);
          const float f = drop.factor<float>(g, bh, i, j);
          ds = p * (sm.f.sd.dp[r * L::kLdS + c] * f - sm.dsum[c]);
          p *= f;
        }
        sm.p[r * L::kLdP + c] = X::template bits<T>(p);
        sm.ds[r * L::kLdP + c] = X::template bits<T>(ds);
      }
    });
    x.warp_sync();
    // dV += P^T dO, dK += dS^T Q. kk outermost, as in dq: the P and dS tiles
    // are loaded once for every n, and at kDim 128 the 16 accumulators then
    // fit the registers (n outermost spilled).
    x.warps([&](int w) {
      GPIPE_NO_UNROLL
      for (int kk = 0; kk < kTile / 16; ++kk) {
        GPIPE_UNROLL
        for (int n = 0; n < kN; ++n) {
          X::template mma_ab<T>(dv.get(w)[n], sm.p + 16 * w * L::kLdP + 16 * kk, L::kLdP,
                                sm.t2 + 16 * kk * L::kLdH + 16 * n, L::kLdH);
          X::template mma_ab<T>(dk.get(w)[n], sm.ds + 16 * w * L::kLdP + 16 * kk, L::kLdP,
                                sm.t1 + 16 * kk * L::kLdH + 16 * n, L::kLdH);
        }
      }
    });
  }
  // Each result through o: dv, then dk (scaled).
  auto at = [&](int64_t j) { return g.k_at(bh, j); };
  emit_rows<X, kDim>(x, sm, dv, gv, j0, g.tk, 1.0f, g, at);
  emit_rows<X, kDim>(x, sm, dk, gk, j0, g.tk, scale, g, at);
}

}  // namespace gpipe::ops::cuda::mma
