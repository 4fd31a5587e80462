// Global-norm clipping and finiteness checks.
#include "optim/clip.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "core/tensor.h"

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

TEST_CASE("clip_grad_norm rejects a bad max_norm") {
  Tensor a = with_grad({1});
  CHECK_THROWS_WITH(clip_grad_norm({{"a", &a}}, 0.0),
                    Contains("clip_grad_norm: max_norm must be > 0, got 0"));
  CHECK_THROWS_WITH(clip_grad_norm({{"a", &a}}, -1.0), Contains("got -1"));
}

}  // namespace
}  // namespace gpipe::optim
