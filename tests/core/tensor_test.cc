#include "core/tensor.h"

#include <catch2/catch.hpp>

#include "ops/shape.h"

using namespace gpipe;
using Catch::Contains;

TEST_CASE("tensor: creation, element access and printing") {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.dtype() == DType::kFloat32);
  CHECK(t.device() == Device("cpu:0"));
  CHECK(t.is_contiguous());
  CHECK(t.at({1, 2}) == 6);
  t.set({0, 1}, 9);
  CHECK(t.at({0, 1}) == 9);
  CHECK(Tensor::full(Shape{2}, 3.5, DType::kFloat64).to_vector<double>() ==
        std::vector<double>{3.5, 3.5});
  CHECK(Tensor::scalar(2).item() == 2);
  CHECK_THAT(t.str(), Contains("shape=[2, 3]") && Contains("float32") && Contains("9"));
}

TEST_CASE("tensor: views share storage; contiguous copies") {
  Tensor t = Tensor::from_vector<double>({0, 1, 2, 3, 4, 5}, Shape{2, 3});
  Tensor tt = ops::transpose(t, 0, 1);
  CHECK(tt.shares_storage_with(t));
  CHECK_FALSE(tt.is_contiguous());
  CHECK(tt.at({2, 1}) == 5);
  Tensor c = tt.contiguous();
  CHECK(c.is_contiguous());
  CHECK_FALSE(c.shares_storage_with(t));
  CHECK(c.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  Tensor row = ops::narrow(t, 0, 1, 1);
  CHECK(row.shares_storage_with(t));
  CHECK(row.to_vector<double>() == std::vector<double>{3, 4, 5});
  Tensor r = ops::reshape(t, {3, 2});
  CHECK(r.shares_storage_with(t));
}

TEST_CASE("tensor: copies between views with contiguous rows move every element to its place") {
  // Views whose last axis is contiguous (a narrowed last axis, a concat's
  // pieces) are copied a row at a time; each element must land where the
  // element-wise index says, also with a dtype conversion and an offset.
  std::vector<float> values(4 * 3 * 10);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f - 7.0f;
  const Tensor base = Tensor::from_vector<float>(values, Shape{4, 3, 10});
  const Tensor part = ops::narrow(ops::narrow(base, 2, 3, 5), 0, 1, 2);  // [2, 3, 5], offset 33
  REQUIRE_FALSE(part.is_contiguous());
  std::vector<float> expected;
  for (int64_t a = 1; a < 3; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t c = 3; c < 8; ++c) expected.push_back(values[(a * 3 + b) * 10 + c]);
  CHECK(part.contiguous().to_vector<float>() == expected);
  std::vector<double> wide(expected.begin(), expected.end());
  CHECK(part.to(DType::kFloat64).to_vector<double>() == wide);
  // Into a view: the columns around it keep their values.
  Tensor dst = Tensor::zeros(Shape{2, 3, 9});
  Tensor window = ops::narrow(dst, 2, 2, 5);
  window.copy_from(part);
  const std::vector<float> out = dst.to_vector<float>();
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 9; ++c) {
      const float want = c >= 2 && c < 7 ? expected[r * 5 + (c - 2)] : 0.0f;
      CHECK(out[r * 9 + c] == want);
    }
  std::vector<float> twice;
  for (int64_t r = 0; r < 6; ++r)
    for (int rep = 0; rep < 2; ++rep)
      twice.insert(twice.end(), expected.begin() + r * 5, expected.begin() + r * 5 + 5);
  CHECK(ops::concat({part, part}, 2).to_vector<float>() == twice);
}

TEST_CASE("tensor: dtype conversion and device moves between cpu devices") {
  Tensor t = Tensor::from_vector<int64_t>({1, -2, 3}, Shape{3});
  CHECK(t.to(DType::kFloat32).to_vector<float>() == std::vector<float>{1, -2, 3});
  Tensor f = Tensor::from_vector<float>({1, 2}, Shape{2});
  Tensor g = f.to(Device("cpu:1"));
  CHECK(g.device() == Device("cpu:1"));
  CHECK(g.to_vector<float>() == std::vector<float>{1, 2});
  CHECK_FALSE(g.shares_storage_with(f));
}

TEST_CASE("tensor: bad input gives readable errors") {
  CHECK_THROWS_WITH(Tensor::from_vector<float>({1, 2, 3}, Shape{2, 2}),
                    Contains("3 values do not fill shape [2, 2]"));
  Tensor t = Tensor::zeros(Shape{2, 2});
  CHECK_THROWS_WITH(t.at({2, 0}), Contains("index 2 out of range for axis 0 of shape [2, 2]"));
  CHECK_THROWS_WITH(t.at({0}), Contains("got 1 indices for a tensor of shape [2, 2]"));
  CHECK_THROWS_WITH(t.data<double>(), Contains("dtype float32 accessed as float64"));
  CHECK_THROWS_WITH(t.item(), Contains("expected a tensor with one element"));
  CHECK_THROWS_AS(Device("gpu:0"), Error);
  CHECK_THROWS_WITH(Device("gpu:0"), Contains("invalid device 'gpu:0'"));
  CHECK_THROWS_WITH(Device("cpu:x"), Contains("non-negative integer"));
  CHECK_THROWS_WITH(Tensor::zeros(Shape{2}, DType::kFloat32, Device("cuda:0")),
                    Contains("built without CUDA"));
  CHECK_THROWS_WITH(Tensor::zeros(Shape{2}, DType::kInt64).set_requires_grad(true),
                    Contains("only float tensors"));
  CHECK_THROWS_WITH(ops::reshape(t, {3, -1}), Contains("cannot reshape [2, 2]"));
  CHECK_THROWS_WITH(ops::narrow(t, 1, 1, 2), Contains("outside axis 1 of shape [2, 2]"));
  CHECK_THROWS_WITH(ops::permute(t, {0, 0}), Contains("appears twice"));
  CHECK_THROWS_WITH(ops::split(t, {1, 2}, 0), Contains("sum to 3 but axis 0"));
  CHECK_THROWS_WITH(ops::concat({t, Tensor::zeros(Shape{2, 3, 1})}, 0), Contains("ranks differ"));
  CHECK_THROWS_WITH(t.shape().normalize_axis(5, "sum"), Contains("sum: axis 5 is out of range"));
}

TEST_CASE("tensor: randn is deterministic in its seed") {
  Tensor a = Tensor::randn(Shape{1000}, 7), b = Tensor::randn(Shape{1000}, 7),
         c = Tensor::randn(Shape{1000}, 8);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(a.to_vector<float>() != c.to_vector<float>());
  double mean = 0, var = 0;
  for (float v : a.to_vector<float>()) mean += v / 1000.0;
  for (float v : a.to_vector<float>()) var += (v - mean) * (v - mean) / 1000.0;
  CHECK(std::abs(mean) < 0.1);
  CHECK(std::abs(var - 1) < 0.15);
}

TEST_CASE("Tensor::set rounds the value into a 16-bit tensor (it wrote the number as bits)") {
  // GCC's parenthesised aggregate initialisation made static_cast<bfloat16>(1.5)
  // the bit pattern 1 (a subnormal); clang refused it, which is how it was found.
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    Tensor x = Tensor::zeros(Shape{2}, t);
    x.set({1}, 1.5);
    x.set({0}, -3.0);
    CHECK(x.at({1}) == 1.5);
    CHECK(x.at({0}) == -3.0);
  }
}

TEST_CASE("shape: bounded_extent counts empty axes as 1 and refuses overflow") {
  CHECK(bounded_extent({2, 3, 4}, 100) == std::optional<int64_t>(24));
  CHECK(bounded_extent({0, 3}, 100) == std::optional<int64_t>(3));
  CHECK(bounded_extent({}, 1) == std::optional<int64_t>(1));
  CHECK_FALSE(bounded_extent({2, 3, 4}, 23).has_value());
  CHECK_FALSE(bounded_extent({-1, 3}, 100).has_value());
  // numel is 0, but the strides of [0, 5e18, 39] do not fit in 64 bits.
  CHECK_FALSE(bounded_extent({0, 5000000000000000000, 39}, INT64_MAX).has_value());
}
