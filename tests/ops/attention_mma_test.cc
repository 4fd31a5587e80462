// The tensor-core flash attention bodies (Note [Tensor-core flash attention]
// in ops/cuda/attention_mma.h) run on the CPU: HostExec executes each block's
// phases one thread (or warp) after another, with the 16 x 16 x 16 tile
// products as float32 loops over the same 16-bit bits the tensor cores read,
// and shared memory and the per-warp accumulators poisoned with NaNs. The
// outputs, each row's log-sum-exp and the gradients of q, k, v are checked
// against the CPU's attention op (float64, on the inputs rounded to the
// 16-bit type), in bfloat16 and float16, at shapes with several blocks and
// tiles, ragged edges, heads padded to the kernel's width, Tq != Tk, causal
// and key-padding masks and a fully padded example (uniform rows). The GPU
// runs the same bodies through WMMA (DeviceExec in ops/cuda/attention.cu);
// tests/cuda/fused_test.cc compares that against the CPU on a GPU.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/rng.h"
#include "ops/attention.h"
#include "ops/cuda/attention_mma_backward.h"

namespace gpipe {
namespace {

using ops::cuda::Geometry;
namespace mma = ops::cuda::mma;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The CPU's stand-in for DeviceExec: the same phases, run in turn.
struct HostExec {
  struct Acc {
    float v[256];
  };
  template <int N>
  struct WarpLocal {
    WarpLocal() {
      for (auto& w : a)
        for (auto& t : w) std::fill(t.v, t.v + 256, kNaN);
    }
    Acc* get(int w) { return a[w]; }
    Acc a[mma::kWarps][N];
  };
  // reverse: the threads (and warps) of each phase last to first, so a
  // phase that read what another thread of the same phase writes would see
  // a different value in one of the two orders.
  template <class F>
  void threads(F&& f) {
    for (int i = 0; i < mma::kThreads; ++i) f(reverse ? mma::kThreads - 1 - i : i);
  }
  template <class F>
  void warps(F&& f) {
    for (int i = 0; i < mma::kWarps; ++i) f(reverse ? mma::kWarps - 1 - i : i);
  }
  void sync() {}
  void warp_sync() {}
  bool reverse = false;

  static void zero(Acc& a) { std::fill(a.v, a.v + 256, 0.0f); }
  static void load(Acc& a, const float* p, int ld) {
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) a.v[m * 16 + n] = p[m * ld + n];
  }
  static void store(float* p, int ld, const Acc& a) {
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) p[m * ld + n] = a.v[m * 16 + n];
  }
  // C += A B, A row-major; B row-major, or (kBT) B^T row-major.
  template <class T, bool kBT>
  static void product(Acc& c, const uint16_t* a, int lda, const uint16_t* b, int ldb) {
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        float s = c.v[m * 16 + n];
        for (int k = 0; k < 16; ++k)
          s += value<T>(a[m * lda + k]) * value<T>(kBT ? b[n * ldb + k] : b[k * ldb + n]);
        c.v[m * 16 + n] = s;
      }
  }
  template <class T>
  static void mma_ab(Acc& c, const uint16_t* a, int lda, const uint16_t* b, int ldb) {
    product<T, false>(c, a, lda, b, ldb);
  }
  template <class T>
  static void mma_abt(Acc& c, const uint16_t* a, int lda, const uint16_t* b, int ldb) {
    product<T, true>(c, a, lda, b, ldb);
  }
  static void copy8(uint16_t* dst, const uint16_t* src) { std::memcpy(dst, src, 16); }
  static void zero8(uint16_t* dst) { std::memset(dst, 0, 16); }
  static float exp(float v) { return std::exp(v); }
  static float log(float v) { return std::log(v); }
  template <class T>
  static float value(uint16_t b) {
    if constexpr (std::is_same_v<T, bfloat16>) return bf16_bits_to_float(b);
    return f16_bits_to_float(b);
  }
  template <class T>
  static uint16_t bits(float f) {
    if constexpr (std::is_same_v<T, bfloat16>) return float_to_bf16_bits(f);
    return float_to_f16_bits(f);
  }
};

template <class S>
std::unique_ptr<S> poisoned() {
  auto p = std::make_unique<S>();
  std::memset(static_cast<void*>(p.get()), 0xff, sizeof(S));  // NaN floats, NaN 16-bit values
  return p;
}

struct Shape4 {
  const char* name;
  int64_t b, tq, tk, heads, dh;
  bool causal, padded;
};

struct Result {
  std::vector<float> out, lse, gq, gk, gv;
};

template <class T>
std::vector<T> to_half(const std::vector<double>& x) {
  std::vector<T> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i].bits = HostExec::bits<T>(static_cast<float>(x[i]));
  return r;
}
template <class T>
std::vector<float> to_float(const std::vector<T>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = HostExec::value<T>(x[i].bits);
  return r;
}

// Every block of the three kernels, in launch order; reverse: each phase's
// threads last to first.
template <class T, int kDim>
Result emulate(const Geometry& g, const std::vector<T>& q, const std::vector<T>& k,
               const std::vector<T>& v, const std::vector<T>* pad, const std::vector<T>& gout,
               bool reverse) {
  const int64_t pairs = g.b * g.heads;
  std::vector<T> out(q.size(), T{0xffff}), gq(q.size(), T{0xffff}), gk(k.size(), T{0xffff}),
      gv(v.size(), T{0xffff});
  std::vector<float> lse(static_cast<size_t>(pairs * g.tq), kNaN), dsum(lse.size(), kNaN);
  const T* pp = pad ? pad->data() : nullptr;
  const int64_t q_blocks = (g.tq + mma::kRows - 1) / mma::kRows;
  const int64_t k_blocks = (g.tk + mma::kRows - 1) / mma::kRows;
  for (int64_t bh = 0; bh < pairs; ++bh)
    for (int64_t blk = 0; blk < q_blocks; ++blk) {
      auto sm = poisoned<mma::ForwardSmem<kDim>>();
      HostExec x;
      x.reverse = reverse;
      mma::forward_block<HostExec, T, kDim>(x, *sm, q.data(), k.data(), v.data(), pp, out.data(),
                                            lse.data(), g, blk, bh);
    }
  for (int64_t bh = 0; bh < pairs; ++bh)
    for (int64_t blk = 0; blk < q_blocks; ++blk) {
      auto sm = poisoned<mma::BackwardSmem<kDim>>();
      HostExec x;
      x.reverse = reverse;
      mma::backward_queries_block<HostExec, T, kDim>(x, *sm, q.data(), k.data(), v.data(), pp,
                                                     out.data(), gout.data(), lse.data(),
                                                     dsum.data(), gq.data(), g, blk, bh);
    }
  for (int64_t bh = 0; bh < pairs; ++bh)
    for (int64_t blk = 0; blk < k_blocks; ++blk) {
      auto sm = poisoned<mma::BackwardSmem<kDim>>();
      HostExec x;
      x.reverse = reverse;
      mma::backward_keys_block<HostExec, T, kDim>(x, *sm, q.data(), k.data(), v.data(), pp,
                                                  gout.data(), lse.data(), dsum.data(), gk.data(),
                                                  gv.data(), g, blk, bh);
    }
  return {to_float(out), lse, to_float(gq), to_float(gk), to_float(gv)};
}

// max |a - b| / max(1, |b|); NaN anywhere is infinitely wrong.
double rel_err(const std::vector<float>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i]));
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

std::vector<double> uniform(size_t n, uint32_t seed, double lo, double hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> r(n);
  for (double& x : r) x = d(gen);
  return r;
}

// vec8: rows staged 16 bytes at a time (Geometry::vec8; the vectors' data
// start on 16 bytes, as malloc gives).
// drop_p > 0: dropout on the probabilities (Note [Attention dropout] in
// ops/attention.cc), the CPU op with the same mask as the reference.
template <class T>
void check(const Shape4& s, double tol, bool vec8, double drop_p = 0) {
  const int64_t d = s.heads * s.dh;
  Geometry g{};
  g.b = s.b;
  g.tq = s.tq;
  g.tk = s.tk;
  g.d = d;
  g.heads = s.heads;
  g.dh = s.dh;
  g.scale = 1.0 / std::sqrt(static_cast<double>(s.dh));
  g.causal = s.causal;
  g.vec8 = vec8;
  const ops::FusedDropout dropout{drop_p, 13};
  if (drop_p > 0) {
    g.drop_scale = 1.0 / (1.0 - drop_p);
    g.drop_threshold = dropout_keep_threshold(drop_p);
    g.drop_key = current_rng_context().key(dropout.salt);
  }
  // Inputs rounded to T: the reference sees exactly the values the kernels do.
  auto rounded = [](const std::vector<double>& x) {
    std::vector<double> r(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      r[i] = HostExec::value<T>(HostExec::bits<T>(static_cast<float>(x[i])));
    return r;
  };
  const auto q = rounded(uniform(s.b * s.tq * d, 1, -2, 2));
  const auto k = rounded(uniform(s.b * s.tk * d, 2, -2, 2));
  const auto v = rounded(uniform(s.b * s.tk * d, 3, -1, 1));
  const auto go = rounded(uniform(s.b * s.tq * d, 4, -1, 1));
  // Example e pads its last (e * 37) % tk keys; the last example pads them all.
  std::vector<double> pad(s.b * s.tk, 0.0);
  for (int64_t e = 0; s.padded && e < s.b; ++e) {
    const int64_t n = e == s.b - 1 ? s.tk : (e * 37) % s.tk;
    for (int64_t j = s.tk - n; j < s.tk; ++j) pad[e * s.tk + j] = 1.0;
  }

  const std::vector<T> pad_h = to_half<T>(pad);
  auto run = [&](bool reverse) {
    return ops::cuda::with_head_width(s.dh, [&](auto dim) {
      return emulate<T, decltype(dim)::value>(g, to_half<T>(q), to_half<T>(k), to_half<T>(v),
                                              s.padded ? &pad_h : nullptr, to_half<T>(go), reverse);
    });
  };
  const Result got = run(false);
  // The same bits whichever order a phase's threads run in.
  const Result back = run(true);
  CHECK(back.out == got.out);
  CHECK(back.gq == got.gq);
  CHECK(back.gk == got.gk);
  CHECK(back.gv == got.gv);

  Tensor tq = Tensor::from_vector(q, Shape{s.b, s.tq, d}),
         tk = Tensor::from_vector(k, Shape{s.b, s.tk, d}),
         tv = Tensor::from_vector(v, Shape{s.b, s.tk, d});
  for (Tensor* t : {&tq, &tk, &tv}) t->set_requires_grad(true);
  const Tensor tpad = s.padded ? Tensor::from_vector(pad, Shape{s.b, s.tk}) : Tensor();
  const Tensor out = ops::attention(tq, tk, tv, s.heads, s.causal, tpad, dropout);
  backward({out}, {Tensor::from_vector(go, out.shape())});

  // The log-sum-exp of each row's visible scaled scores (-inf: no visible key).
  std::vector<double> lse(static_cast<size_t>(s.b * s.heads * s.tq));
  for (int64_t bh = 0; bh < s.b * s.heads; ++bh)
    for (int64_t i = 0; i < s.tq; ++i) {
      double mx = -INFINITY, sum = 0;
      std::vector<double> sc;
      for (int64_t j = 0; j < g.visible_end(i); ++j) {
        if (pad[(bh / s.heads) * s.tk + j] != 0) continue;
        double dot = 0;
        for (int64_t c = 0; c < s.dh; ++c) dot += q[g.q_at(bh, i) + c] * k[g.k_at(bh, j) + c];
        sc.push_back(dot * g.scale);
        mx = std::max(mx, sc.back());
      }
      for (double x : sc) sum += std::exp(x - mx);
      lse[bh * s.tq + i] = sc.empty() ? -INFINITY : mx + std::log(sum);
    }
  std::vector<float> got_lse = got.lse;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (lse[i] == -INFINITY) {
      CHECK(got_lse[i] == -INFINITY);
      got_lse[i] = 0;
      lse[i] = 0;
    }
  }

  INFO(s.name << " / " << dtype_name(dtype_of<T>()) << (vec8 ? " / 16-byte staging" : "")
              << (drop_p > 0 ? " / dropout" : ""));
  const double e_out = rel_err(got.out, out.to_vector<double>());
  const double e_lse = rel_err(got_lse, lse);
  const double e_gq = rel_err(got.gq, tq.grad().to_vector<double>());
  const double e_gk = rel_err(got.gk, tk.grad().to_vector<double>());
  const double e_gv = rel_err(got.gv, tv.grad().to_vector<double>());
  INFO("errors: out " << e_out << ", lse " << e_lse << ", gq " << e_gq << ", gk " << e_gk << ", gv "
                      << e_gv << " (tolerance " << tol << ")");
  CHECK(e_out <= tol);
  CHECK(e_lse <= tol);
  CHECK(e_gq <= tol);
  CHECK(e_gk <= tol);
  CHECK(e_gv <= tol);
}

const Shape4 kShapes[] = {
    // name, b, tq, tk, heads, dh, causal, padded
    {"self 130 tokens, dh 64", 2, 130, 130, 2, 64, false, false},
    {"causal 150 tokens, padded, dh 40 (padded to 64)", 3, 150, 150, 3, 40, true, true},
    {"cross 70 queries x 133 keys, padded, dh 32", 3, 70, 133, 2, 32, false, true},
    {"cross 70 queries x 5 keys, dh 128", 1, 70, 5, 1, 128, false, false},
    {"causal 33 queries x 47 keys, dh 9 (padded to 16)", 2, 33, 47, 3, 9, true, false},
    {"causal 100 queries x 70 keys, padded, dh 16", 2, 100, 70, 1, 16, true, true},
};

// Every shape element by element, and 16 bytes at a time where dh allows;
// and with dropout (p 0.2).
template <class T>
void check_all(double tol) {
  for (const Shape4& s : kShapes) {
    for (bool vec8 : {false, true})
      if (!vec8 || s.dh % 8 == 0) check<T>(s, tol, vec8);
    check<T>(s, tol, false, 0.2);
  }
}

TEST_CASE("tensor-core flash attention (emulated on the CPU): bfloat16 against the CPU op") {
  check_all<bfloat16>(4 * std::ldexp(1.0, -8));
}

TEST_CASE("tensor-core flash attention (emulated on the CPU): float16 against the CPU op") {
  check_all<float16>(4 * std::ldexp(1.0, -11));
}

TEST_CASE("tensor-core flash attention: shared memory fits the GPU's per-block limit") {
  // sm_80 lets a block opt in to 163 KB (166912 bytes), sm_90 to 227 KB.
  CHECK(sizeof(mma::ForwardSmem<128>) <= 166912);
  CHECK(sizeof(mma::BackwardSmem<128>) <= 166912);
  CHECK(sizeof(mma::ForwardSmem<64>) <= 100 * 1024);
}

}  // namespace
}  // namespace gpipe
