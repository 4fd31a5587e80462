// Op-table cases of the language models' ops: RMSNorm, rotary embedding
// (plain and with Llama 3.1's frequency scaling, at a position offset),
// GELU with the tanh approximation, SiLU and SwiGLU. Each against a naive
// reference here, gradients against finite differences (the table's).
#include <catch2/catch.hpp>
#include <cmath>

#include "core/cpu_isa.h"
#include "ops/gated.h"
#include "ops/rms_norm.h"
#include "ops/rotary.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

using In = std::vector<Tensor>;

void check_rms_norm(const Tensor& x, const Tensor& w, double eps, const Tensor& out) {
  REQUIRE(out.shape() == x.shape());
  const auto v = x.to_vector<double>(), o = out.to_vector<double>();
  const auto g = w.defined() ? w.to_vector<double>() : std::vector<double>();
  const int64_t d = x.size(-1), rows = x.numel() / d;
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < d; ++i) ms += v[r * d + i] * v[r * d + i] / d;
    for (int64_t i = 0; i < d; ++i) {
      const double y = v[r * d + i] / std::sqrt(ms + eps) * (g.empty() ? 1.0 : g[i]);
      worst = std::max(worst, std::abs(o[r * d + i] - y));
    }
  }
  CHECK(worst < 1e-10);
}

// Rotation of dims (i, i + dh/2) of each head by the float32 angle p * inv_freq[i].
void check_rotary(const Tensor& x, int64_t heads, const ops::RotaryOptions& opt, int64_t offset,
                  const Tensor& out) {
  REQUIRE(out.shape() == x.shape());
  const auto v = x.to_vector<double>(), o = out.to_vector<double>();
  const int64_t b = x.size(0), t = x.size(1), dh = x.size(2) / heads, half = dh / 2;
  const std::vector<double> inv = ops::rotary_inv_freq(dh, opt);
  double worst = 0;
  for (int64_t n = 0; n < b; ++n)
    for (int64_t p = 0; p < t; ++p)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const float angle = static_cast<float>(offset + p) * static_cast<float>(inv[i]);
          const double c = std::cos(angle), s = std::sin(angle);
          const int64_t at = ((n * t + p) * heads + h) * dh + i;
          const double x1 = v[at], x2 = v[at + half];
          worst = std::max(worst, std::abs(o[at] - (x1 * c - x2 * s)));
          worst = std::max(worst, std::abs(o[at + half] - (x2 * c + x1 * s)));
        }
  CHECK(worst < 1e-6);  // cos / sin in float32, as the reference implementation
}

void check_unary(const Tensor& x, const Tensor& out, double (*f)(double)) {
  REQUIRE(out.shape() == x.shape());
  const auto v = x.to_vector<double>(), o = out.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < v.size(); ++i) worst = std::max(worst, std::abs(o[i] - f(v[i])));
  CHECK(worst < 1e-12);
}

double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double silu_ref(double x) { return x / (1 + std::exp(-x)); }

ops::RotaryOptions llama31() {
  return {.enabled = true,
          .theta = 500000,
          .scaling = {
              .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_context = 64}};
}

GPIPE_OP_CASES({
    OpCase{
        .name = "rms_norm/weight",
        .covers = {"rms_norm_forward", "rms_norm_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 6}, 31), rand64(Shape{6}, 32, 0.5, 1.5)};
            },
        .fn = [](const In& in) { return In{ops::rms_norm(in[0], in[1], 1e-5)}; },
        .check_forward = [](const In& in,
                            const In& out) { check_rms_norm(in[0], in[1], 1e-5, out[0]); },
    },
    OpCase{
        .name = "rms_norm/no_weight",
        .covers = {"rms_norm_forward", "rms_norm_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{4, 5}, 33)};
            },
        .fn = [](const In& in) { return In{ops::rms_norm(in[0], Tensor(), 1e-3)}; },
        .check_forward = [](const In& in,
                            const In& out) { check_rms_norm(in[0], Tensor(), 1e-3, out[0]); },
    },
    OpCase{
        .name = "rotary/plain",
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 8}, 34)};
            },  // 2 heads of 4
        .fn =
            [](const In& in) {
              return In{ops::rotary_embedding(in[0], 2, {.enabled = true, .theta = 10000})};
            },
        .check_forward =
            [](const In& in, const In& out) {
              check_rotary(in[0], 2, {.enabled = true, .theta = 10000}, 0, out[0]);
            },
    },
    OpCase{
        // Every band of Llama 3.1's scaling (kept, blended, scaled) at head dim 16,
        // a 64-token original context, positions from 5.
        .name = "rotary/llama3_scaling_offset",
        .make_inputs =
            [] {
              return In{rand64(Shape{1, 3, 32}, 35)};
            },  // 2 heads of 16
        .fn = [](const In& in) { return In{ops::rotary_embedding(in[0], 2, llama31(), 5)}; },
        .check_forward = [](const In& in,
                            const In& out) { check_rotary(in[0], 2, llama31(), 5, out[0]); },
    },
    OpCase{
        .name = "gelu_tanh",
        .covers = {"bias_act_forward", "bias_act_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{3, 7}, 36, -3, 3)};
            },
        .fn = [](const In& in) { return In{ops::gelu_tanh(in[0])}; },
        .check_forward = [](const In& in,
                            const In& out) { check_unary(in[0], out[0], gelu_tanh_ref); },
    },
    OpCase{
        .name = "silu",
        .covers = {"bias_act_forward", "bias_act_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{3, 7}, 37, -4, 4)};
            },
        .fn = [](const In& in) { return In{ops::silu(in[0])}; },
        .check_forward = [](const In& in, const In& out) { check_unary(in[0], out[0], silu_ref); },
    },
    OpCase{
        .name = "swiglu",
        .covers = {"bias_act_forward", "bias_act_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 5}, 38, -3, 3), rand64(Shape{2, 5}, 39)};
            },
        .fn = [](const In& in) { return In{ops::swiglu(in[0], in[1])}; },
        .check_forward =
            [](const In& in, const In& out) {
              const auto g = in[0].to_vector<double>(), u = in[1].to_vector<double>();
              const auto o = out[0].to_vector<double>();
              double worst = 0;
              for (size_t i = 0; i < g.size(); ++i)
                worst = std::max(worst, std::abs(o[i] - silu_ref(g[i]) * u[i]));
              CHECK(worst < 1e-12);
            },
    },
    // The plain twins the fused passes above are held against.
    OpCase{
        .name = "rms_norm/composed",
        .make_inputs =
            [] {
              return In{rand64(Shape{3, 2, 33}, 43), rand64(Shape{33}, 44, 0.5, 1.5)};
            },
        .fn = [](const In& in) { return In{ops::rms_norm_composed(in[0], in[1], 1e-5)}; },
        .check_forward =
            [](const In& in, const In& out) {
              check_rms_norm(in[0], in[1], 1e-5, out[0]);
              CHECK(max_abs_diff(out[0], ops::rms_norm(in[0], in[1], 1e-5)) < 1e-14);
            },
    },
    OpCase{
        .name = "gelu_tanh/composed",
        .make_inputs =
            [] {
              return In{rand64(Shape{3, 7}, 40, -3, 3)};
            },
        .fn = [](const In& in) { return In{ops::gelu_tanh_composed(in[0])}; },
        .check_forward =
            [](const In& in, const In& out) {
              check_unary(in[0], out[0], gelu_tanh_ref);
              CHECK(max_abs_diff(out[0], ops::gelu_tanh(in[0])) < 1e-12);
            },
    },
    OpCase{
        .name = "swiglu/composed",
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 5}, 41, -3, 3), rand64(Shape{2, 5}, 42)};
            },
        .fn = [](const In& in) { return In{ops::swiglu_composed(in[0], in[1])}; },
        .check_forward =
            [](const In& in, const In& out) {
              CHECK(max_abs_diff(out[0], ops::swiglu(in[0], in[1])) < 1e-12);
              CHECK(max_abs_diff(ops::silu_composed(in[0]), ops::silu(in[0])) < 1e-12);
            },
    },
});

// The fused RMSNorm's gradients against the composed form's, at every ISA
// level, with and without a weight (a row of 65: a tail past the 16 lanes).
TEST_CASE("rms_norm: fused gradients equal the composed ops' gradients at every ISA level") {
  for (int level = 0; level <= static_cast<int>(detected_cpu_isa()); ++level) {
    CpuIsaGuard guard(static_cast<CpuIsa>(level));
    for (bool with_weight : {true, false}) {
      INFO(cpu_isa_name(cpu_isa()) << (with_weight ? " weight" : " no weight"));
      auto grads = [&](bool fused) {
        Tensor x = rand64(Shape{2, 7, 65}, 45, -2.0, 2.0).set_requires_grad(true);
        Tensor w = with_weight ? rand64(Shape{65}, 46, 0.5, 1.5).set_requires_grad(true) : Tensor();
        Tensor y = fused ? ops::rms_norm(x, w, 1e-5) : ops::rms_norm_composed(x, w, 1e-5);
        y.backward(rand64(y.shape(), 47));
        return std::make_pair(x.grad(), with_weight ? w.grad() : Tensor());
      };
      const auto [gx, gw] = grads(true);
      const auto [rx, rw] = grads(false);
      CHECK(max_abs_diff(gx, rx) <= 1e-13);
      if (with_weight) CHECK(max_abs_diff(gw, rw) <= 1e-12);
    }
  }
}

// The scaling's bands, from the formula (Llama 3.1: wavelengths above
// original_context / low_freq_factor divided by the factor, below
// original_context / high_freq_factor kept).
TEST_CASE("rotary: Llama 3.1 frequency scaling keeps, blends and scales by wavelength") {
  const ops::RotaryOptions plain{.enabled = true, .theta = 500000};
  const std::vector<double> base = ops::rotary_inv_freq(16, plain);
  const std::vector<double> scaled = ops::rotary_inv_freq(16, llama31());
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    const double wavelen = 2 * M_PI / base[i];
    if (wavelen < 64.0 / 4) {
      CHECK(scaled[i] == base[i]);
      ++kept;
    } else if (wavelen > 64.0 / 1) {
      CHECK(scaled[i] == Approx(base[i] / 8).epsilon(1e-6));
      ++divided;
    } else {
      CHECK(scaled[i] < base[i]);
      CHECK(scaled[i] > base[i] / 8);
      ++blended;
    }
  }
  CHECK(kept > 0);
  CHECK(divided > 0);
  CHECK(blended > 0);
}

}  // namespace
}  // namespace gpipe::testing
