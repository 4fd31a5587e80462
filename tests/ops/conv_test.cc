// conv2d beyond the op table: error messages, float32 vs float64, the
// depthwise fast path against the general (GEMM) path, thread-count
// independence of the parallel strategies, strided inputs, and gradients only
// where they are needed.
#include "ops/conv.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "core/autograd.h"
#include "core/parallel.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "ops/shape.h"

using namespace gpipe;
using Catch::Contains;

namespace {

Tensor rnd(const Shape& s, uint64_t seed, DType dtype = DType::kFloat64) {
  return Tensor::uniform(s, seed, -1.0, 1.0, dtype);
}

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

struct ConvRun {
  Tensor y, gx, gw, gb;
};

// Forward, then backward of sum(y * r) for a fixed random r.
ConvRun run_conv(const Tensor& x0, const Tensor& w0, const Tensor& b0,
                 const ops::Conv2dOptions& opt) {
  Tensor x = x0.clone().set_requires_grad(true);
  Tensor w = w0.clone().set_requires_grad(true);
  Tensor b = b0.defined() ? b0.clone().set_requires_grad(true) : Tensor();
  Tensor y = ops::conv2d(x, w, b, opt);
  Tensor r = rnd(y.shape(), 99).to(y.dtype());  // same numbers in either dtype
  ops::sum(ops::mul(y, r)).backward();
  return {y.detach(), x.grad(), w.grad(), b.defined() ? b.grad() : Tensor()};
}

void check_close(const ConvRun& a, const ConvRun& b, double tol) {
  CHECK(max_diff(a.y, b.y) < tol);
  CHECK(max_diff(a.gx, b.gx) < tol);
  CHECK(max_diff(a.gw, b.gw) < tol);
  if (a.gb.defined()) CHECK(max_diff(a.gb, b.gb) < tol);
}

}  // namespace

TEST_CASE("conv2d: bad inputs give readable errors") {
  const Tensor x = rnd(Shape{2, 4, 5, 5}, 1), w = rnd(Shape{8, 4, 3, 3}, 2);
  CHECK_THROWS_WITH(ops::conv2d(rnd(Shape{4, 5, 5}, 1), w, Tensor()),
                    Contains("conv2d: expected input [N, C, H, W] of rank 4, got shape [4, 5, 5]"));
  CHECK_THROWS_WITH(ops::conv2d(x, rnd(Shape{8, 4, 3}, 2), Tensor()),
                    Contains("conv2d: expected weight [out, in/groups, kh, kw] of rank 4"));
  CHECK_THROWS_WITH(
      ops::conv2d(x, rnd(Shape{8, 3, 3, 3}, 2), Tensor()),
      Contains("expected weight [out, in/groups, kh, kw] = [8, 4, 3, 3], got [8, 3, 3, 3]"));
  ops::Conv2dOptions g3;
  g3.groups = 3;
  CHECK_THROWS_WITH(ops::conv2d(rnd(Shape{1, 6, 5, 5}, 1), rnd(Shape{8, 2, 3, 3}, 2), Tensor(), g3),
                    Contains("output channels 8 are not divisible by groups 3"));
  CHECK_THROWS_WITH(ops::conv2d(x, rnd(Shape{6, 1, 3, 3}, 2), Tensor(), g3),
                    Contains("input channels 4 are not divisible by groups 3"));
  ops::Conv2dOptions g0;
  g0.groups = 0;
  CHECK_THROWS_WITH(ops::conv2d(x, w, Tensor(), g0), Contains("groups must be positive, got 0"));
  CHECK_THROWS_WITH(ops::conv2d(x, w, rnd(Shape{4}, 3)),
                    Contains("conv2d: expected bias [8], got [4]"));
  ops::Conv2dOptions bad_stride;
  bad_stride.stride = {1, 0};
  CHECK_THROWS_WITH(ops::conv2d(x, w, Tensor(), bad_stride),
                    Contains("stride must be positive, got [1, 0]"));
  ops::Conv2dOptions bad_dil;
  bad_dil.dilation = {0, 1};
  CHECK_THROWS_WITH(ops::conv2d(x, w, Tensor(), bad_dil),
                    Contains("dilation must be positive, got [0, 1]"));
  ops::Conv2dOptions bad_pad;
  bad_pad.padding = {-1, 0};
  CHECK_THROWS_WITH(ops::conv2d(x, w, Tensor(), bad_pad),
                    Contains("padding must be non-negative, got [-1, 0]"));
  CHECK_THROWS_WITH(ops::conv2d(rnd(Shape{1, 4, 2, 5}, 1), w, Tensor()),
                    Contains("conv2d: output size would be [0, 3]"));
  ops::Conv2dOptions dilated;
  dilated.dilation = {3, 3};
  CHECK_THROWS_WITH(ops::conv2d(x, w, Tensor(), dilated), Contains("output size would be [0, 0]"));
  CHECK_THROWS_WITH(ops::conv2d(x.to(DType::kFloat32), w, Tensor()), Contains("dtype"));
  CHECK_THROWS_WITH(ops::conv2d(Tensor::zeros(Shape{1, 4, 5, 5}, DType::kInt64), w, Tensor()),
                    Contains("expected a float32 or float64 tensor"));
}

TEST_CASE("conv2d: float32 agrees with float64, forward and backward") {
  struct Config {
    Shape x, w;
    ops::Conv2dOptions opt;
  };
  const std::vector<Config> configs = {
      {Shape{2, 3, 9, 8}, Shape{5, 3, 3, 3}, {{2, 1}, {1, 1}, {1, 1}, 1}},
      {Shape{2, 4, 7, 7}, Shape{4, 1, 3, 3}, {{1, 1}, {2, 2}, {2, 2}, 4}},  // depthwise
      {Shape{3, 6, 4, 4}, Shape{6, 6, 1, 1}, {}},                           // pointwise
      {Shape{2, 4, 6, 9}, Shape{4, 2, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 2}},
  };
  for (const Config& c : configs) {
    INFO("x " << c.x << ", w " << c.w);
    const Tensor x = rnd(c.x, 3), w = rnd(c.w, 4), b = rnd(Shape{c.w[0]}, 5);
    const ConvRun d = run_conv(x, w, b, c.opt);
    const ConvRun f =
        run_conv(x.to(DType::kFloat32), w.to(DType::kFloat32), b.to(DType::kFloat32), c.opt);
    CHECK(f.y.dtype() == DType::kFloat32);
    CHECK(f.gw.dtype() == DType::kFloat32);
    check_close(d, f, 1e-4);
  }
}

TEST_CASE("conv2d: the depthwise path equals per-channel general convolutions") {
  // groups == C takes the direct depthwise kernels; a one-channel convolution
  // with groups == 1 takes im2col + GEMM. Both must give the same numbers.
  const ops::Conv2dOptions opt{{2, 1}, {1, 2}, {1, 2}, 3};
  const Tensor x = rnd(Shape{2, 3, 7, 8}, 6), w = rnd(Shape{6, 1, 3, 3}, 7), b = rnd(Shape{6}, 8);
  const ConvRun fused = run_conv(x, w, b, opt);

  Tensor xs = x.clone().set_requires_grad(true), ws = w.clone().set_requires_grad(true);
  Tensor bs = b.clone().set_requires_grad(true);
  ops::Conv2dOptions single = opt;
  single.groups = 1;
  std::vector<Tensor> parts;
  for (int64_t c = 0; c < 3; ++c)
    parts.push_back(ops::conv2d(ops::narrow(xs, 1, c, 1), ops::narrow(ws, 0, 2 * c, 2),
                                ops::narrow(bs, 0, 2 * c, 2), single));
  Tensor y = ops::concat(parts, 1);
  ops::sum(ops::mul(y, rnd(y.shape(), 99))).backward();
  check_close(fused, ConvRun{y.detach(), xs.grad(), ws.grad(), bs.grad()}, 1e-12);
}

TEST_CASE("conv2d: results do not depend on the intra-op thread count") {
  // Batch 8 with 4 threads: parallel over (sample, group) with per-thread
  // partial weight gradients; batch 2 with 4 threads: one task at a time with
  // the GEMMs split over the pool; 1 thread: everything serial.
  struct Config {
    Shape x, w;
    ops::Conv2dOptions opt;
  };
  const std::vector<Config> configs = {
      {Shape{8, 3, 10, 9}, Shape{6, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},
      {Shape{2, 16, 12, 12}, Shape{32, 16, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},
      {Shape{8, 4, 6, 6}, Shape{4, 2, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 2}},
      {Shape{8, 4, 6, 6}, Shape{8, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 4}},
      {Shape{8, 8, 5, 5}, Shape{16, 8, 1, 1}, {}},
      {Shape{1, 32, 20, 20}, Shape{64, 32, 1, 1}, {}},
  };
  ThreadPool one(1), four(4);
  for (const Config& c : configs) {
    INFO("x " << c.x << ", w " << c.w);
    const Tensor x = rnd(c.x, 9), w = rnd(c.w, 10), b = rnd(Shape{c.w[0]}, 11);
    ConvRun serial, parallel;
    {
      IntraOpScope scope(&one);
      serial = run_conv(x, w, b, c.opt);
    }
    {
      IntraOpScope scope(&four);
      parallel = run_conv(x, w, b, c.opt);
    }
    check_close(serial, parallel, 1e-12);
  }
}

TEST_CASE("conv2d: non-contiguous inputs give the same result as contiguous ones") {
  const Tensor base = rnd(Shape{2, 5, 6, 3}, 12);  // [N, H, W, C]
  const Tensor x = ops::permute(base, {0, 3, 1, 2});
  REQUIRE_FALSE(x.is_contiguous());
  const Tensor w = rnd(Shape{4, 3, 3, 3}, 13);
  const ops::Conv2dOptions opt{{1, 1}, {1, 1}, {1, 1}, 1};
  CHECK(max_diff(ops::conv2d(x, w, Tensor(), opt), ops::conv2d(x.contiguous(), w, Tensor(), opt)) ==
        0);
}

TEST_CASE("conv2d: gradients reach only the inputs that require them") {
  const Tensor x = rnd(Shape{2, 3, 5, 5}, 14);
  Tensor w = rnd(Shape{4, 3, 3, 3}, 15).set_requires_grad(true);
  Tensor b = rnd(Shape{4}, 16);
  Tensor y = ops::conv2d(x, w, b);
  REQUIRE(y.requires_grad());
  ops::sum(y).backward();
  CHECK(w.grad().defined());
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(b.grad().defined());
  {
    NoGradGuard no_grad;
    CHECK_FALSE(ops::conv2d(x, w, b).requires_grad());
  }
}

TEST_CASE("conv2d: a 1x1 convolution is a per-pixel matrix product") {
  const Tensor x = rnd(Shape{2, 3, 2, 2}, 17), w = rnd(Shape{2, 3, 1, 1}, 18);
  const Tensor y = ops::conv2d(x, w, Tensor());
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t o = 0; o < 2; ++o)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 2; ++j) {
          double s = 0;
          for (int64_t c = 0; c < 3; ++c) s += w.at({o, c, 0, 0}) * x.at({n, c, i, j});
          CHECK(std::abs(y.at({n, o, i, j}) - s) < 1e-14);
        }
}

TEST_CASE("conv2d: the batched small-plane path equals sample-by-sample convolutions") {
  // Planes under 512 outputs with one group take the batched path (several
  // samples' columns in one GEMM, ops/cpu/conv.cc); a batch of one takes the
  // per-sample path. 40 samples of 8x8 make four runs of 10, so the weight
  // gradient also accumulates across runs. The runs depend on the shape
  // only: one and two threads give the same bits.
  struct Config {
    Shape x, w;
    ops::Conv2dOptions opt;
  };
  const std::vector<Config> configs = {
      {Shape{40, 3, 8, 8}, Shape{5, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},
      {Shape{40, 6, 8, 8}, Shape{4, 6, 1, 1}, {}},
      {Shape{9, 4, 5, 9}, Shape{3, 4, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}},
      {Shape{7, 3, 9, 8}, Shape{6, 3, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}},
      {Shape{5, 8, 1, 1}, Shape{3, 8, 1, 1}, {}},
  };
  ThreadPool one(1), two(2);
  std::vector<ConvRun> serial;
  for (ThreadPool* pool : {&one, &two}) {
    IntraOpScope scope(pool);
    for (size_t ci = 0; ci < configs.size(); ++ci) {
      const Config& c = configs[ci];
      INFO("x " << c.x << ", w " << c.w << ", threads " << pool->size());
      const Tensor x = rnd(c.x, 21), w = rnd(c.w, 22), b = rnd(Shape{c.w[0]}, 23);
      const ConvRun batched = run_conv(x, w, b, c.opt);
      const ConvRun batched32 =
          run_conv(x.to(DType::kFloat32), w.to(DType::kFloat32), b.to(DType::kFloat32), c.opt);
      if (pool == &one) {
        serial.push_back(batched32);
      } else {
        CHECK(max_diff(batched32.y, serial[ci].y) == 0);
        CHECK(max_diff(batched32.gx, serial[ci].gx) == 0);
        CHECK(max_diff(batched32.gw, serial[ci].gw) == 0);
        CHECK(max_diff(batched32.gb, serial[ci].gb) == 0);
      }
      Tensor ws = w.clone().set_requires_grad(true), bs = b.clone().set_requires_grad(true);
      std::vector<Tensor> xs, ys;
      for (int64_t n = 0; n < c.x[0]; ++n) {
        xs.push_back(ops::narrow(x, 0, n, 1).clone().set_requires_grad(true));
        ys.push_back(ops::conv2d(xs.back(), ws, bs, c.opt));
      }
      Tensor y = ops::concat(ys, 0);
      ops::sum(ops::mul(y, rnd(y.shape(), 99))).backward();
      std::vector<Tensor> gxs;
      for (const Tensor& xi : xs) gxs.push_back(xi.grad());
      check_close(batched, ConvRun{y.detach(), ops::concat(gxs, 0), ws.grad(), bs.grad()}, 1e-12);
    }
  }
}
