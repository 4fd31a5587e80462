// Op-table cases: elementwise arithmetic, broadcasting and activations.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>

#include "ops/elementwise.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

// Reference: out[i] = f(a[ia], b[ib]) with numpy broadcasting, by index math.
Tensor broadcast_ref(const Tensor& a, const Tensor& b,
                     const std::function<double(double, double)>& f) {
  const Shape s = broadcast_shapes(a.shape(), b.shape(), "ref");
  Tensor out = Tensor::zeros(s, DType::kFloat64);
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  const auto sa = a.shape().contiguous_strides(), sb = b.shape().contiguous_strides();
  for (int64_t flat = 0; flat < s.numel(); ++flat) {
    int64_t rem = flat, ia = 0, ib = 0;
    for (int64_t d = s.rank() - 1; d >= 0; --d) {
      const int64_t i = rem % s[d];
      rem /= s[d];
      const int64_t da = d - (s.rank() - a.rank()), db = d - (s.rank() - b.rank());
      if (da >= 0 && a.shape()[da] != 1) ia += i * sa[da];
      if (db >= 0 && b.shape()[db] != 1) ib += i * sb[db];
    }
    out.data<double>()[flat] = f(va[ia], vb[ib]);
  }
  return out;
}

OpCase binary_case(std::string name, const char* kernel, Shape sa, Shape sb,
                   std::function<Tensor(const Tensor&, const Tensor&)> op,
                   std::function<double(double, double)> ref, double lo = -1, double hi = 1) {
  return OpCase{
      .name = std::move(name),
      .covers = {kernel},
      .make_inputs =
          [=] {
            return std::vector<Tensor>{rand64(sa, 1, lo, hi), rand64(sb, 2, lo, hi)};
          },
      .fn = [=](const std::vector<Tensor>& in) { return std::vector<Tensor>{op(in[0], in[1])}; },
      .check_forward =
          [=](const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
            CHECK(max_abs_diff(out[0], broadcast_ref(in[0], in[1], ref)) < 1e-12);
          },
  };
}

OpCase unary_case(std::string name, std::function<Tensor(const Tensor&)> op,
                  std::function<double(double)> ref, double lo = -2, double hi = 2,
                  Shape shape = Shape{3, 5}) {
  return OpCase{
      .name = std::move(name),
      .covers = {"unary_elementwise", "unary_backward"},
      .make_inputs = [=] { return std::vector<Tensor>{rand64(shape, 3, lo, hi)}; },
      .fn = [=](const std::vector<Tensor>& in) { return std::vector<Tensor>{op(in[0])}; },
      .check_forward =
          [=](const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
            const auto x = in[0].to_vector<double>(), y = out[0].to_vector<double>();
            for (size_t i = 0; i < x.size(); ++i) CHECK(std::abs(y[i] - ref(x[i])) < 1e-12);
          },
  };
}

// Inputs bounded away from 0 so relu/abs have no kink within eps.
Tensor away_from_zero(const Shape& s, uint64_t seed) {
  Tensor t = rand64(s, seed, 0.1, 1.0);
  Tensor sign = rand64(s, seed + 7, -1, 1);
  double* p = t.data<double>();
  const auto sg = sign.to_vector<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] *= sg[i] < 0 ? -1 : 1;
  return t;
}

GPIPE_OP_CASES({
    binary_case("add/same_shape", "binary_elementwise", Shape{3, 4}, Shape{3, 4}, ops::add,
                [](double a, double b) { return a + b; }),
    binary_case("add/broadcast_row", "binary_elementwise", Shape{2, 3, 4}, Shape{4}, ops::add,
                [](double a, double b) { return a + b; }),
    binary_case("sub/broadcast_both", "binary_elementwise", Shape{3, 1}, Shape{1, 4}, ops::sub,
                [](double a, double b) { return a - b; }),
    binary_case("mul/broadcast_channel", "binary_elementwise", Shape{2, 3, 2, 2}, Shape{1, 3, 1, 1},
                ops::mul, [](double a, double b) { return a * b; }),
    binary_case(
        "div/broadcast", "binary_elementwise", Shape{2, 3}, Shape{2, 1}, ops::div,
        [](double a, double b) { return a / b; }, 0.5, 2.0),
    binary_case("mul/scalar_tensor", "binary_elementwise", Shape{}, Shape{2, 2}, ops::mul,
                [](double a, double b) { return a * b; }),
    unary_case("neg", ops::neg, [](double x) { return -x; }),
    unary_case(
        "add_scalar", [](const Tensor& x) { return ops::add_scalar(x, 1.5); },
        [](double x) { return x + 1.5; }),
    unary_case(
        "mul_scalar", [](const Tensor& x) { return ops::mul_scalar(x, -0.25); },
        [](double x) { return -0.25 * x; }),
    unary_case(
        "pow/3", [](const Tensor& x) { return ops::pow(x, 3.0); },
        [](double x) { return x * x * x; }),
    unary_case(
        "pow/fractional", [](const Tensor& x) { return ops::pow(x, 1.5); },
        [](double x) { return std::pow(x, 1.5); }, 0.2, 2.0),
    unary_case("gelu", ops::gelu,
               [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }),
    unary_case("tanh", ops::tanh, [](double x) { return std::tanh(x); }),
    unary_case("sigmoid", ops::sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }),
    unary_case("exp", ops::exp, [](double x) { return std::exp(x); }),
    unary_case(
        "log", ops::log, [](double x) { return std::log(x); }, 0.1, 3.0),
    unary_case(
        "sqrt", ops::sqrt, [](double x) { return std::sqrt(x); }, 0.1, 3.0),
    OpCase{
        .name = "relu",
        .covers = {"unary_elementwise", "unary_backward"},
        .make_inputs =
            [] {
              return std::vector<Tensor>{away_from_zero(Shape{4, 5}, 11)};
            },
        .fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::relu(in[0])}; },
        .check_forward =
            [](const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
              const auto x = in[0].to_vector<double>(), y = out[0].to_vector<double>();
              for (size_t i = 0; i < x.size(); ++i) CHECK(y[i] == (x[i] > 0 ? x[i] : 0.0));
            },
    },
    OpCase{
        .name = "abs",
        .covers = {"unary_elementwise", "unary_backward"},
        .make_inputs =
            [] {
              return std::vector<Tensor>{away_from_zero(Shape{4, 5}, 12)};
            },
        .fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::abs(in[0])}; },
        .check_forward =
            [](const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
              const auto x = in[0].to_vector<double>(), y = out[0].to_vector<double>();
              for (size_t i = 0; i < x.size(); ++i) CHECK(y[i] == std::abs(x[i]));
            },
    },
    // An input used three times: its gradients are summed in place
    // (core/autograd.cc) by the accumulate_into kernel, over more elements
    // than a vector holds and with a remainder.
    OpCase{
        .name = "gradient sum/an input used three times",
        .covers = {"accumulate_into"},
        .make_inputs =
            [] {
              return std::vector<Tensor>{rand64(Shape{3, 37}, 15), rand64(Shape{3, 37}, 16),
                                         rand64(Shape{3, 37}, 17)};
            },
        .fn =
            [](const std::vector<Tensor>& in) {
              return std::vector<Tensor>{
                  ops::add(ops::add(ops::mul(in[0], in[1]), ops::mul(in[0], in[2])), in[0])};
            },
        .check_forward =
            [](const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
              const auto x = in[0].to_vector<double>(), a = in[1].to_vector<double>(),
                         b = in[2].to_vector<double>(), y = out[0].to_vector<double>();
              for (size_t i = 0; i < x.size(); ++i)
                CHECK(y[i] == Approx(x[i] * a[i] + x[i] * b[i] + x[i]).epsilon(1e-14));
            },
    },
    // The float32 round trip differentiates as the identity (the gradient is
    // cast back); eps is large against float32's rounding of the input.
    OpCase{
        .name = "cast/float32 round trip",
        .covers = {"cast_into"},
        .make_inputs =
            [] {
              return std::vector<Tensor>{rand64(Shape{3, 7}, 13, -4, 4)};
            },
        .fn =
            [](const std::vector<Tensor>& in) {
              return std::vector<Tensor>{
                  ops::cast(ops::cast(in[0], DType::kFloat32), in[0].dtype())};
            },
        .check_forward =
            [](const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
              const auto x = in[0].to_vector<double>(), y = out[0].to_vector<double>();
              for (size_t i = 0; i < x.size(); ++i)
                CHECK(y[i] == static_cast<double>(static_cast<float>(x[i])));
            },
        .eps = 1e-3,
        .tolerance = 1e-4,
    },
    // Rounding to bfloat16 / float16 is a step function (finite differences
    // see zero); the forward against the scalar conversions, no gradient check.
    OpCase{
        .name = "cast/bfloat16 and float16 (no gradient check)",
        .covers = {"cast_into"},
        .make_inputs =
            [] {
              return std::vector<Tensor>{rand64(Shape{5, 9}, 14, -300, 300)};
            },
        .fn =
            [](const std::vector<Tensor>& in) {
              const DType d = in[0].dtype();
              return std::vector<Tensor>{ops::cast(ops::cast(in[0], DType::kBFloat16), d),
                                         ops::cast(ops::cast(in[0], DType::kFloat16), d)};
            },
        .check_forward =
            [](const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
              const auto x = in[0].to_vector<double>();
              const auto b = out[0].to_vector<double>(), h = out[1].to_vector<double>();
              for (size_t i = 0; i < x.size(); ++i) {
                const float f = static_cast<float>(x[i]);
                CHECK(b[i] == bf16_bits_to_float(float_to_bf16_bits(f)));
                CHECK(h[i] == f16_bits_to_float(float_to_f16_bits(f)));
              }
            },
        .check_grad = false,
        .tolerance32 = 1e-2,  // x rounded to float32 first can round to a neighbour
    },
});

}  // namespace
}  // namespace gpipe::testing
