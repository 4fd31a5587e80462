#include <catch2/catch.hpp>

#include "ops/cpu/blas.h"
#include "ops/ops.h"

using namespace gpipe;
using Catch::Contains;

TEST_CASE("matmul: float32 agrees with float64 and all GEMM backends agree") {
  Tensor a = Tensor::randn(Shape{67, 129}, 1), b = Tensor::randn(Shape{129, 45}, 2);
  Tensor ref = ops::matmul(a.to(DType::kFloat64), b.to(DType::kFloat64));
  for (auto backend : {ops::cpu::GemmBackend::kPacked, ops::cpu::GemmBackend::kBlas,
                       ops::cpu::GemmBackend::kEigen}) {
    ops::cpu::set_gemm_backend(backend);
    Tensor c = ops::matmul(a, b);
    const auto vc = c.to_vector<double>(), vr = ref.to_vector<double>();
    double worst = 0;
    for (size_t i = 0; i < vc.size(); ++i) worst = std::max(worst, std::abs(vc[i] - vr[i]));
    CHECK(worst < 1e-3);
  }
  ops::cpu::set_gemm_backend(ops::cpu::GemmBackend::kPacked);
}

TEST_CASE("matmul: shape errors name both shapes") {
  Tensor a = Tensor::zeros(Shape{32, 256}), b = Tensor::zeros(Shape{512, 10});
  CHECK_THROWS_WITH(ops::matmul(a, b),
                    Contains("inner sizes differ: [32, 256] @ [512, 10] (256 vs 512)"));
  CHECK_THROWS_WITH(ops::matmul(Tensor::zeros(Shape{2, 3, 4}), Tensor::zeros(Shape{3, 4, 5})),
                    Contains("batch axes differ"));
  CHECK_THROWS_WITH(ops::matmul(Tensor::zeros(Shape{4}), b), Contains("rank >= 2"));
  CHECK_THROWS_WITH(ops::linear(a, Tensor::zeros(Shape{10, 128})),
                    Contains("expected last axis 128"));
  CHECK_THROWS_WITH(
      ops::matmul(Tensor::zeros(Shape{2, 2}, DType::kInt64), Tensor::zeros(Shape{2, 2})),
      Contains("expected a float32 or float64 tensor"));
}
