// Cross-entropy CPU kernels, one logits row (contiguous, C classes) at a time.
//
// Forward: a serial pass counts the rows that are not ignored (the targets
// were validated by ops/cpu/isa_dispatch.cc); then, in parallel, each row gets lse = max +
// log(sum(exp(x - max))) and its loss (1 - eps) * (lse - x[t]) + eps * (lse - mean(x)). Row losses
// go to a buffer that is summed in row order afterwards, so the loss does not depend on the thread
// count. Backward: gx = (exp(x - lse) - (1 - eps) * onehot(t) - eps / C) * g / count.
// 16-bit logits are read a row at a time into float32 (the loss and lse are float32).
#include <immintrin.h>

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
// ops/loss.cc, Note [Vocabulary blocks] below).
// Logits columns a block (Note [Vocabulary blocks]): W2 at one thread on a
// 2-core Intel Xeon (Sapphire Rapids class): 256 ran as fast, 1024 and 2048
// 3-8% slower.
constexpr int64_t kVocabBlock = 512;

// Note [Vocabulary blocks]. The rows go through in chunks of z's rows, and
// each chunk's logits through in blocks of kVocabBlock columns, in two
// passes:
//   1. each task takes a contiguous range of the chunk's rows through every
//      block: its rows of x_chunk w_block^T (float32 sums; bfloat16 x and w:
//      the bfloat16 GEMM) into a block-sized buffer that stays in the
//      caches; then per row its max over the block, exp(z - that max) (with
//      a gradient: in place, then streamed to z, which holds the chunk block
//      after block, [rows, width] each) and their sum, merged into the row's
//      running max and sum (the online softmax), its target's logit and,
//      under label smoothing, its logits' sum. After the last block: lse and
//      the row's loss.
//   2. with a gradient, per block: each task's rows of the block's
//      exponentials, times exp(block max - lse), become (softmax - smoothed
//      one-hot) / count in the block buffer (zero on ignored rows; rounded to
//      bfloat16 for bfloat16 x, as the composed 16-bit ops round the logits'
//      gradient), and its rows of gx_chunk += g w_block; then, over the
//      pool, gw_block += g^T x_chunk.
// So the chunk's logits go to memory once and come back once, where the
// whole-row form (a [rows, C] GEMM, a softmax pass, two more GEMMs) wrote,
// read, rewrote and twice more read them, and each product works on operands
// that fit in L2 (W2's head: 8 MB of w, 16 MB of logits a chunk). Without a
// gradient nothing goes to z. The tasks' products are separate GEMMs, on
// the packed GEMM whatever their size (cpu::stable_gemm), whose sums do not
// depend on how the rows are split: the results do not depend on the thread
// count (tests/ops/linear_loss_test.cc compares the bits at 1, 2 and 3
// threads; under bfloat16 each task takes whole 32-row panels, as the AMX
// GEMM's short panels add C in another order). gx accumulates over the
// blocks in float32 (bfloat16: in a float32 buffer, rounded once at the
// end); a row's sums run in block order, and the rows' losses are summed in
// row order at the end, so the loss does not depend on the chunk either
// where the block buffer's rows stay aligned (C a multiple of 16, or 512 and
// more: Eigen's sums over a row start with its unaligned head). The bfloat16
// scratch shrank from [rows, C] to a block. The block scratch comes from x's
// allocator for the call, charged as workspace memory (so the planner's
// profile of the layer includes it), not held by the thread between calls.
// On a 2-core Intel Xeon (`gpipe_bench kernels --filter "linear + cross"`,
// three alternating runs): float32 5% faster at one thread and level with
// the whole-row form at two; under bf16 (`gpipe_bench profile`) 5-8% faster
// at one thread and 0-11% at two.
struct RowStats {
  float max = 0;      // running max over the blocks so far
  double sum = 0;     // sum of exp(z - max) over them
  double zsum = 0;    // sum of the logits (label smoothing's mean)
  double target = 0;  // the target's logit
};

// n floats from src to dst with non-temporal stores where dst allows (the
// logits' store: written once now, read once much later).
void stream_row(const float* src, float* dst, int64_t n) {
  int64_t i = 0;
  if ((reinterpret_cast<uintptr_t>(dst) & 15) == 0)
    for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = src[i];
}

// Pass 1 on rows [lo, hi) of one block (width columns from v0) at zb, rows
// ld apart.
template <class I>
void block_stats(float* zb, int64_t ld, int64_t lo, int64_t hi, int64_t width, int64_t v0,
                 const I* t, bool smoothing, float* block_max, RowStats* st, float* store) {
  for (int64_t i = lo; i < hi; ++i) {
    Vec<float> r(zb + i * ld, width);
    const float m = r.maxCoeff();
    RowStats& s = st[i];
    const int64_t ti = static_cast<int64_t>(t[i]) - v0;
    if (ti >= 0 && ti < width) s.target = static_cast<double>(r[ti]);
    if (smoothing) s.zsum += r.template cast<double>().sum();
    double sum;
    if (store != nullptr) {  // with a gradient: the exponentials, kept for pass 2
      r = (r - m).exp();
      sum = static_cast<double>(r.sum());
      stream_row(zb + i * ld, store + i * width, width);
    } else {
      sum = static_cast<double>((r - m).exp().sum());
    }
    block_max[i] = m;
    if (v0 == 0) {
      s.max = m;
      s.sum = sum;
    } else {
      const float top = std::max(s.max, m);
      s.sum = s.sum * std::exp(static_cast<double>(s.max) - top) +
              sum * std::exp(static_cast<double>(m) - top);
      s.max = top;
    }
  }
}

// Pass 2's gradient of rows [lo, hi) of one block: g (rows ld apart) = (e
// exp(block max - lse) - off) * scale, minus hit * scale at the target;
// zero on ignored rows.
template <class I>
void block_grad(const float* e, float* g, int64_t ld, int64_t lo, int64_t hi, int64_t width,
                int64_t v0, const I* t, int64_t ignore_index, const float* block_max,
                const double* lse, float off, float hit, float scale) {
  for (int64_t i = lo; i < hi; ++i) {
    Vec<float> gr(g + i * ld, width);
    const int64_t ti = static_cast<int64_t>(t[i]);
    if (ti == ignore_index) {
      gr.setZero();
      continue;
    }
    const float f = static_cast<float>(std::exp(static_cast<double>(block_max[i]) - lse[i]));
    gr = (ConstVec<float>(e + i * width, width) * f - off) * scale;
    if (ti >= v0 && ti < v0 + width) gr[ti - v0] -= hit * scale;
  }
}

void linear_cross_entropy_cpu(const Tensor& x, const Tensor& w, const Tensor& targets,
                              int64_t ignore_index, double label_smoothing, Tensor& zs,
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
    const double eps = label_smoothing;
    const double scale = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
    const float off = static_cast<float>(eps / c), hit = static_cast<float>(1.0 - eps);
    const float fscale = static_cast<float>(scale);
    const int64_t per = zs.size(0), block = std::min(kVocabBlock, c);
    const int64_t blocks = (c + block - 1) / block;
    float* z = zs.data<float>();
    float* pgw = gw.defined() ? gw.data<float>() : nullptr;
    const auto* px16 = bf16 ? reinterpret_cast<const uint16_t*>(x.data<bfloat16>()) : nullptr;
    const auto* pw16 = bf16 ? reinterpret_cast<const uint16_t*>(w.data<bfloat16>()) : nullptr;
    const float* px32 = bf16 ? nullptr : x.data<float>();
    const float* pw32 = bf16 ? nullptr : w.data<float>();
    // Block-sized scratch from x's allocator, charged as workspace (the
    // planner's profile sees it): the block buffer, its bfloat16 rounding and
    // bfloat16's float32 gx. W2's head: 1 MB, 0.5 MB and 0.5 MB.
    const bool bf16_grad = grad && bf16;
    Workspace<float> zbuf(x.device(), per * block), gxbuf(x.device(), bf16_grad ? per * d : 0);
    Workspace<bfloat16> ghbuf(x.device(), bf16_grad ? per * block : 0);
    vector<double> row_loss(static_cast<size_t>(n), 0.0), lse(static_cast<size_t>(per));
    vector<float> block_max(static_cast<size_t>(per * blocks));
    vector<RowStats> stats(static_cast<size_t>(per));
    // Each task takes a contiguous range of a chunk's rows through every
    // block (Note [Vocabulary blocks]): its products on the calling thread.
    const int threads = intra_op_threads();
    for (int64_t r0 = 0; r0 < n; r0 += per) {
      const int64_t rows = std::min(per, n - r0);
      // bfloat16: whole 32-row panels a task, so the AMX GEMM's panels, whose
      // short ones add C in another order (run_tile's scratch), fall where
      // one task's would.
      const int64_t align = bf16 ? 32 : 1;
      const int64_t grain =
          std::max<int64_t>(1, ((rows + threads - 1) / threads + align - 1) / align * align);
      std::fill(stats.begin(), stats.end(), RowStats{});
      float* zb = zbuf.data();
      const auto* x16 = bf16 ? px16 + r0 * d : nullptr;
      const float* x32 = bf16 ? nullptr : px32 + r0 * d;
      // Pass 1. Block b's exponentials go to z + rows * v0, rows of width.
      // zb's rows are `block` apart whatever the block's width: the tasks
      // reach the short last block at different times.
      parallel_for(0, rows, grain, [&](int64_t lo, int64_t hi) {
        for (int64_t b = 0, v0 = 0; b < blocks; ++b, v0 += block) {
          const int64_t width = std::min(block, c - v0);
          if (bf16)
            cpu::gemm_bf16(false, true, hi - lo, width, d, 1.0f, x16 + lo * d, d, pw16 + v0 * d, d,
                           0.0f, zb + lo * block, block, false);
          else
            cpu::stable_gemm(false, true, hi - lo, width, d, x32 + lo * d, d, pw32 + v0 * d, d,
                             0.0f, zb + lo * block, block, false);
          block_stats(zb, block, lo, hi, width, v0, pt + r0, eps != 0.0, block_max.data() + b * per,
                      stats.data(), grad ? z + rows * v0 : nullptr);
        }
        _mm_sfence();  // the streamed stores, before pass 2 reads them
      });
      for (int64_t i = 0; i < rows; ++i) {
        const RowStats& s = stats[static_cast<size_t>(i)];
        const double l = static_cast<double>(s.max) + std::log(s.sum);
        lse[static_cast<size_t>(i)] = l;
        if (static_cast<int64_t>(pt[r0 + i]) != ignore_index)
          row_loss[static_cast<size_t>(r0 + i)] =
              (1.0 - eps) * (l - s.target) + eps * (l - s.zsum / static_cast<double>(c));
      }
      if (!grad) continue;
      // Pass 2: per block, each task's rows of g and gx, then gw's block.
      float* gx32 = bf16 ? gxbuf.data() : gx.data<float>() + r0 * d;
      for (int64_t b = 0, v0 = 0; b < blocks; ++b, v0 += block) {
        const int64_t width = std::min(block, c - v0);
        const float beta_x = b == 0 ? 0.0f : 1.0f, beta_w = r0 == 0 ? 0.0f : 1.0f;
        auto* gh = reinterpret_cast<uint16_t*>(ghbuf.data());
        parallel_for(0, rows, grain, [&](int64_t lo, int64_t hi) {
          block_grad(z + rows * v0, zb, block, lo, hi, width, v0, pt + r0, ignore_index,
                     block_max.data() + b * per, lse.data(), off, hit, fscale);
          if (bf16) {
            for (int64_t i = lo; i < hi; ++i)
              narrow_row(zb + i * block, ghbuf.data() + i * block, width);
            cpu::gemm_bf16(false, false, hi - lo, d, width, 1.0f, gh + lo * block, block,
                           pw16 + v0 * d, d, beta_x, gx32 + lo * d, d, false);
          } else {
            cpu::stable_gemm(false, false, hi - lo, d, width, zb + lo * block, block, pw32 + v0 * d,
                             d, beta_x, gx32 + lo * d, d, false);
          }
        });
        if (bf16)
          cpu::gemm_bf16(true, false, width, d, rows, 1.0f, gh, block, x16, d, beta_w, pgw + v0 * d,
                         d, true);
        else
          cpu::stable_gemm(true, false, width, d, rows, zb, block, x32, d, beta_w, pgw + v0 * d, d,
                           true);
      }
      if (bf16) narrow_row(gxbuf.data(), gx.data<bfloat16>() + r0 * d, rows * d);
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
