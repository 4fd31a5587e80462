// Global-norm clipping and finiteness checks.
#include "optim/clip.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "core/parallel.h"
#include "core/tensor.h"
#include "ops/reduce_kernels.h"

namespace gpipe::optim {
namespace {

using Catch::Matchers::Contains;

Tensor with_grad(std::vector<double> grad, DType dtype = DType::kFloat32, Device device = kCpu) {
  const Shape shape{static_cast<int64_t>(grad.size())};
  Tensor p = Tensor::zeros(shape, dtype, device);
  p.set_requires_grad(true);
  Tensor g = Tensor::from_vector(grad, shape).to(dtype);
  if (device != kCpu) g = g.to(device);
  p.set_grad(g);
  return p;
}

TEST_CASE("clip_grad_norm returns the pre-clip norm and scales to max_norm") {
  // Gradients (3, 4) on cpu:0 and (12) in float64 on cpu:1: norm sqrt(9 + 16 + 144) = 13.
  Tensor a = with_grad({3, 4});
  Tensor b = with_grad({12}, DType::kFloat64, Device{DeviceType::kCPU, 1});
  Tensor none = Tensor::zeros(Shape{2});  // no gradient: ignored
  const std::vector<NamedTensor> ps{{"a", &a}, {"b", &b}, {"none", &none}};
  CHECK(grad_norm(ps) == 13.0);
  CHECK(clip_grad_norm(ps, 100.0) == 13.0);  // under the limit: unchanged
  CHECK(a.grad().to_vector<double>() == std::vector<double>{3, 4});

  CHECK(clip_grad_norm(ps, 6.5) == 13.0);
  const double f = 6.5 / (13.0 + 1e-6);
  CHECK(a.grad().to_vector<double>()[0] == Approx(3 * f).epsilon(1e-6));
  CHECK(a.grad().to_vector<double>()[1] == Approx(4 * f).epsilon(1e-6));
  CHECK(b.grad().to_vector<double>()[0] == Approx(12 * f).epsilon(1e-15));
  CHECK(grad_norm(ps) == Approx(6.5).epsilon(1e-6));
}

TEST_CASE("clip_grad_norm counts a tied tensor once") {
  Tensor w = with_grad({3, 4});
  CHECK(clip_grad_norm({{"enc.w", &w}, {"dec.w", &w}}, 1.0) == 5.0);  // not sqrt(50)
  CHECK(w.grad().to_vector<double>()[0] == Approx(0.6).epsilon(1e-6));
}

TEST_CASE("A non-finite norm is reported and nothing is scaled") {
  Tensor a = with_grad({3, 4});
  Tensor b = with_grad({std::numeric_limits<double>::infinity()});
  CHECK(std::isinf(clip_grad_norm({{"a", &a}, {"b", &b}}, 1.0)));
  CHECK(a.grad().to_vector<double>() == std::vector<double>{3, 4});
  CHECK_FALSE(all_finite({{"a", &a}, {"b", &b}}));
  CHECK(all_finite({{"a", &a}}));
  Tensor n = with_grad({1, std::nan("")}, DType::kFloat64);
  CHECK(std::isnan(clip_grad_norm({{"n", &n}}, 1.0)));
  CHECK_FALSE(all_finite(n.grad()));
  CHECK(all_finite(Tensor::from_vector<double>({1, 2}, Shape{2})));
}

TEST_CASE("The norm is exact in float64 for large float32 gradients, whatever the split") {
  const int64_t n = 300001;
  Tensor p = with_grad(std::vector<double>(n, 0.5));
  CHECK(grad_norm({{"p", &p}}) == std::sqrt(0.25 * n));
}

TEST_CASE("The norm is the same bits at any thread count, the blocks added in order") {
  // Values whose squares do not add associatively in double, over many blocks.
  std::vector<double> v(5 * ops::kSquaresBlock + 17);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37 * static_cast<double>(i)) * 1e3;
  Tensor p = with_grad(v, DType::kFloat64);
  Tensor q = with_grad({1e-8, 3.0}, DType::kFloat32, Device{DeviceType::kCPU, 1});
  const std::vector<NamedTensor> ps{{"p", &p}, {"q", &q}};
  double want = 0;  // the documented order: block by block, blocks in order, tensors in order
  for (size_t b = 0; b < v.size(); b += ops::kSquaresBlock) {
    double block = 0;
    for (size_t i = b; i < std::min(v.size(), b + ops::kSquaresBlock); ++i) block += v[i] * v[i];
    want += block;
  }
  want += static_cast<double>(1e-8f) * static_cast<double>(1e-8f) + 9.0;
  std::vector<double> got;
  const int before = intra_op_threads();
  for (int threads : {1, 2, 3}) {
    set_default_intra_op_threads(threads);
    got.push_back(grad_norm(ps));
  }
  set_default_intra_op_threads(before);
  CHECK(got[0] == std::sqrt(want));
  CHECK(got[1] == got[0]);
  CHECK(got[2] == got[0]);
}

TEST_CASE("clip_grad_norm rejects a bad max_norm") {
  Tensor a = with_grad({1});
  CHECK_THROWS_WITH(clip_grad_norm({{"a", &a}}, 0.0),
                    Contains("clip_grad_norm: max_norm must be > 0, got 0"));
  CHECK_THROWS_WITH(clip_grad_norm({{"a", &a}}, -1.0), Contains("got -1"));
}

}  // namespace
}  // namespace gpipe::optim
