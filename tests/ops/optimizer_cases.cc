// Op-table cases: the optimizers' element kernels (ops/optimizer_kernels.h),
// each run as two pieces of one tensor (the multi-tensor path cuts tensors
// like this) against a plain double-precision loop of the formula in the
// header. No gradient: these are updates, not differentiable ops.
#include <catch2/catch.hpp>
#include <cmath>

#include "ops/optimizer_kernels.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

using In = std::vector<Tensor>;
constexpr int64_t kN = 37, kCut = 16;  // elements, and where the two pieces meet

double lerp(double a, double b, double w) { return a + w * (b - a); }

// in: param, grad, then the state tensors; returns the updated copies.
template <class F>
In run_pieces(const In& in, F kernel) {
  In t;
  for (const Tensor& x : in) t.push_back(x.defined() ? x.clone() : Tensor());
  kernel(t, 0, kCut);
  kernel(t, kCut, kN);
  return t;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(std::abs(got[i] - want[i]) <= 1e-12 * std::max(1.0, std::abs(want[i])));
  }
}

ops::AdamStepArgs adam_args(bool decay, bool decoupled) {
  ops::AdamStepArgs a;
  a.beta2 = 0.999;
  a.one_minus_beta1 = 0.1;
  a.one_minus_beta2 = 0.001;
  a.eps = 1e-8;
  a.weight_decay = decay ? 0.01 : 0.0;
  a.shrink = 1.0 - 0.05 * a.weight_decay;
  a.step_size = 0.05 / (1 - std::pow(0.9, 3));
  a.bc2_sqrt = std::sqrt(1 - std::pow(0.999, 3));
  a.decay = decay;
  a.decoupled = decoupled;
  return a;
}

OpCase adam_case(const char* name, bool decay, bool decoupled) {
  return OpCase{
      .name = name,
      .covers = {"adam_update"},
      .make_inputs =
          [] {
            return In{rand64(Shape{kN}, 61), rand64(Shape{kN}, 62), rand64(Shape{kN}, 63),
                      rand64(Shape{kN}, 64, 0.1, 1.0)};
          },
      .fn =
          [=](const In& in) {
            const ops::AdamStepArgs a = adam_args(decay, decoupled);
            return run_pieces(in, [&](In& t, int64_t lo, int64_t hi) {
              ops::adam_update(t[0].device(), a, t[0], t[1], t[2], t[3], lo, hi);
            });
          },
      .check_forward =
          [=](const In& in, const In& out) {
            const ops::AdamStepArgs a = adam_args(decay, decoupled);
            auto p = in[0].to_vector<double>(), m = in[2].to_vector<double>(),
                 v = in[3].to_vector<double>();
            const auto g = in[1].to_vector<double>();
            for (int64_t i = 0; i < kN; ++i) {
              double d = g[i];
              if (decay && decoupled) p[i] *= a.shrink;
              if (decay && !decoupled) d += a.weight_decay * p[i];
              m[i] = lerp(m[i], d, a.one_minus_beta1);
              v[i] = a.beta2 * v[i] + a.one_minus_beta2 * d * d;
              p[i] -= a.step_size * m[i] / (std::sqrt(v[i]) / a.bc2_sqrt + a.eps);
            }
            check_close(out[0].to_vector<double>(), p);
            check_close(out[2].to_vector<double>(), m);
            check_close(out[3].to_vector<double>(), v);
          },
      .check_grad = false,
  };
}

OpCase sgd_case(const char* name, double momentum, bool nesterov, bool first) {
  return OpCase{
      .name = name,
      .covers = {"sgd_update"},
      .make_inputs =
          [=] {
            In in{rand64(Shape{kN}, 71), rand64(Shape{kN}, 72)};
            in.push_back(momentum != 0 ? rand64(Shape{kN}, 73) : Tensor());
            return in;
          },
      .fn =
          [=](const In& in) {
            ops::SgdStepArgs a{0.1, 0.01, momentum, 0.75, first, nesterov};
            return run_pieces(in, [&](In& t, int64_t lo, int64_t hi) {
              ops::sgd_update(t[0].device(), a, t[0], t[1], t[2], lo, hi);
            });
          },
      .check_forward =
          [=](const In& in, const In& out) {
            auto p = in[0].to_vector<double>();
            const auto g = in[1].to_vector<double>();
            std::vector<double> b = momentum != 0 ? in[2].to_vector<double>() : p;
            for (int64_t i = 0; i < kN; ++i) {
              double d = g[i] + 0.01 * p[i];
              if (momentum != 0) {
                b[i] = first ? d : momentum * b[i] + 0.75 * d;
                d = nesterov ? d + momentum * b[i] : b[i];
              }
              p[i] -= 0.1 * d;
            }
            check_close(out[0].to_vector<double>(), p);
            if (momentum != 0) check_close(out[2].to_vector<double>(), b);
          },
      .check_grad = false,
  };
}

OpCase rmsprop_case(const char* name, double momentum, bool centered) {
  return OpCase{
      .name = name,
      .covers = {"rmsprop_update"},
      .make_inputs =
          [=] {
            In in{rand64(Shape{kN}, 81), rand64(Shape{kN}, 82), rand64(Shape{kN}, 83, 0.5, 1.0)};
            in.push_back(momentum > 0 ? rand64(Shape{kN}, 84) : Tensor());
            in.push_back(centered ? rand64(Shape{kN}, 85, -0.1, 0.1) : Tensor());
            return in;
          },
      .fn =
          [=](const In& in) {
            ops::RmsPropStepArgs a{0.01, 0.02, 0.99, 1e-8, momentum};
            return run_pieces(in, [&](In& t, int64_t lo, int64_t hi) {
              ops::rmsprop_update(t[0].device(), a, t[0], t[1], t[2], t[3], t[4], lo, hi);
            });
          },
      .check_forward =
          [=](const In& in, const In& out) {
            auto p = in[0].to_vector<double>(), s = in[2].to_vector<double>();
            const auto g = in[1].to_vector<double>();
            std::vector<double> b = momentum > 0 ? in[3].to_vector<double>() : p;
            std::vector<double> ga = centered ? in[4].to_vector<double>() : p;
            for (int64_t i = 0; i < kN; ++i) {
              const double d = g[i] + 0.02 * p[i];
              s[i] = 0.99 * s[i] + 0.01 * d * d;
              double avg;
              if (centered) {
                ga[i] = lerp(ga[i], d, 0.01);
                avg = std::sqrt(s[i] - ga[i] * ga[i]) + 1e-8;
              } else {
                avg = std::sqrt(s[i]) + 1e-8;
              }
              if (momentum > 0) {
                b[i] = momentum * b[i] + d / avg;
                p[i] -= 0.01 * b[i];
              } else {
                p[i] -= 0.01 * d / avg;
              }
            }
            check_close(out[0].to_vector<double>(), p);
            check_close(out[2].to_vector<double>(), s);
            if (momentum > 0) check_close(out[3].to_vector<double>(), b);
            if (centered) check_close(out[4].to_vector<double>(), ga);
          },
      .check_grad = false,
  };
}

// Two parameters updated in one call (adam_update_many, where the device has
// it: CUDA) against the per-tensor kernel over each whole tensor (the CPU);
// the second is long enough for several of the multi-tensor chunks.
constexpr int64_t kLong = 70000;

In adam_two_tensors(const In& in) {
  In t;
  for (const Tensor& x : in) t.push_back(x.clone());
  const std::vector<ops::AdamStepArgs> args{adam_args(true, false), adam_args(true, true)};
  const Device dev = t[0].device();
  if (ops::adam_update_many.has(dev.type) && !is_half(t[0].dtype())) {
    std::vector<Tensor> p{t[0], t[4]}, g{t[1], t[5]}, m{t[2], t[6]}, v{t[3], t[7]};
    ops::adam_update_many(dev, args, p, g, m, v);
  } else {
    ops::adam_update(dev, args[0], t[0], t[1], t[2], t[3], 0, t[0].numel());
    ops::adam_update(dev, args[1], t[4], t[5], t[6], t[7], 0, t[4].numel());
  }
  return t;
}

OpCase adam_many_case() {
  return OpCase{
      .name = "adam_update_many/two_tensors (no gradient: an update)",
      .covers = {"adam_update", "adam_update_many"},
      .make_inputs =
          [] {
            return In{rand64(Shape{kN}, 65),    rand64(Shape{kN}, 66),
                      rand64(Shape{kN}, 67),    rand64(Shape{kN}, 68, 0.1, 1.0),
                      rand64(Shape{kLong}, 69), rand64(Shape{kLong}, 70),
                      rand64(Shape{kLong}, 71), rand64(Shape{kLong}, 72, 0.1, 1.0)};
          },
      .fn = adam_two_tensors,
      .check_forward =
          [](const In& in, const In& out) {
            // Each tensor as the two-piece single-tensor cases update it.
            const In want = adam_two_tensors(in);
            for (size_t i = 0; i < want.size(); ++i)
              check_close(out[i].to_vector<double>(), want[i].to_vector<double>());
          },
      .check_grad = false,
  };
}

GPIPE_OP_CASES({
    adam_many_case(),
    adam_case("adam_update/plain", false, false),
    adam_case("adam_update/l2_decay", true, false),
    adam_case("adamw_update/decoupled_decay", true, true),
    sgd_case("sgd_update/no_momentum", 0.0, false, false),
    sgd_case("sgd_update/momentum_first_step", 0.9, false, true),
    sgd_case("sgd_update/momentum", 0.9, false, false),
    sgd_case("sgd_update/nesterov", 0.9, true, false),
    rmsprop_case("rmsprop_update/plain", 0.0, false),
    rmsprop_case("rmsprop_update/momentum_centered", 0.5, true),
});

}  // namespace
}  // namespace gpipe::testing
