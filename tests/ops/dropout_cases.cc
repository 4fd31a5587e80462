// Op-table cases: dropout in training mode. Under a fixed RngContext the op
// is linear in x (the mask depends only on the context), so central
// differences check the masked, rescaled gradient exactly.
#include <catch2/catch.hpp>

#include "core/rng.h"
#include "ops/dropout.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

using In = std::vector<Tensor>;

// Reference: the mask drawn straight from the Philox stream of the context.
void check_dropout(const Tensor& x, double p, uint64_t salt, const Tensor& out) {
  REQUIRE(out.shape() == x.shape());
  const auto v = x.to_vector<double>(), o = out.to_vector<double>();
  std::vector<float> u(v.size());
  philox_uniform(current_rng_context().key(salt), 0, u.data(), static_cast<int64_t>(u.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    const double expect = u[i] >= p ? v[i] / (1.0 - p) : 0.0;
    CHECK(std::abs(o[i] - expect) < 1e-12);
  }
}

GPIPE_OP_CASES({
    OpCase{
        .name = "dropout/p0.3",
        .covers = {"dropout_apply"},
        .make_inputs =
            [] {
              return In{rand64(Shape{4, 5}, 51)};
            },
        .fn = [](const In& in) { return In{ops::dropout(in[0], 0.3, true)}; },
        .check_forward = [](const In& in, const In& out) { check_dropout(in[0], 0.3, 0, out[0]); },
    },
    OpCase{
        .name = "dropout/p0.6_salted_3d",
        .covers = {"dropout_apply"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 4}, 52)};
            },
        .fn = [](const In& in) { return In{ops::dropout(in[0], 0.6, true, 7)}; },
        .check_forward = [](const In& in, const In& out) { check_dropout(in[0], 0.6, 7, out[0]); },
    },
    OpCase{
        // More than two groups of 16 Philox blocks (Note [Vector Philox] in
        // ops/cpu/dropout.cc) and a tail, against the scalar stream.
        .name = "dropout/p0.5_vector_philox",
        .covers = {"dropout_apply"},
        .make_inputs =
            [] {
              return In{rand64(Shape{3, 47}, 53)};
            },
        .fn = [](const In& in) { return In{ops::dropout(in[0], 0.5, true, 11)}; },
        .check_forward = [](const In& in, const In& out) { check_dropout(in[0], 0.5, 11, out[0]); },
    },
});

}  // namespace
}  // namespace gpipe::testing
