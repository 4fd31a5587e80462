// The table-driven op test.
//
// Each op family registers OpCases from its own file (tests/ops/*_cases.cc)
// with GPIPE_OP_CASES; tests/ops/op_table_test.cc runs every case:
//  1. forward: `check_forward` compares the op's output against an
//     independent reference (hand-computed values or a naive loop);
//  2. backward: gradients of sum(out * R) (R fixed random) w.r.t. every float
//     input listed in `grad_inputs` are compared against central finite
//     differences, in float64, at the inputs `make_inputs` returns;
//  3. coverage: every kernel registered for the CPU must be listed in some
//     case's `covers`, so adding a kernel without a test entry fails;
//  4. float32: the same case with every float input cast to float32 agrees
//     with the float64 run, outputs and gradients (tolerance32).
// 1, 2 and 4 run at every CPU ISA level the machine supports (the kernels are
// compiled per level: Note [CPU ISA kernels] in ops/cpu/isa/abi.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace gpipe::testing {

struct OpCase {
  std::string name;                 // unique, e.g. "matmul/transposed"
  std::vector<std::string> covers;  // kernel slot names this case exercises
  // Inputs in float64 (integer tensors allowed, e.g. indices). Small shapes:
  // finite differences evaluate the op twice per element.
  std::function<std::vector<Tensor>()> make_inputs;
  // The op under test. May return any shape; several outputs are summed
  // after their projections by the caller of fn (return them all).
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> fn;
  // Asserts forward values against a reference (use REQUIRE / CHECK).
  std::function<void(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs)>
      check_forward;
  // Indices of inputs to gradient-check; empty = every float input.
  std::vector<int> grad_inputs;
  double eps = 1e-6;        // finite-difference step
  double tolerance = 1e-6;  // max |analytic - numeric| / max(1, |numeric|)
  bool check_grad = true;   // false for ops without a gradient (state it in the name)
  // The float32 run (every float input cast) against the float64 one, outputs
  // and gradients: max |f32 - f64| <= tolerance32 * max(1, max |f64|).
  double tolerance32 = 2e-5;
  // Every float input in bfloat16, then in float16, against float64 on the
  // same rounded values: max |f16 - f64| <= tolerance16 * u * max(1, max
  // |f64|), u the format's unit roundoff (2^-8, 2^-11). false: the op is
  // float32-only by design (say why in the case).
  bool check_16bit = true;
  double tolerance16 = 4;
};

std::vector<OpCase>& op_cases();

struct OpCaseRegistrar {
  explicit OpCaseRegistrar(std::vector<OpCase> cases);
};

// Reference helpers for check_forward.
// Max |a - b| over all elements (shapes must match).
double max_abs_diff(const Tensor& a, const Tensor& b);
// A float64 tensor with uniform values in [lo, hi), deterministic in `seed`.
Tensor rand64(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0);

}  // namespace gpipe::testing

#define GPIPE_OP_CASES_CONCAT2(a, b) a##b
#define GPIPE_OP_CASES_CONCAT(a, b) GPIPE_OP_CASES_CONCAT2(a, b)
// At namespace scope in a *_cases.cc file: GPIPE_OP_CASES({ OpCase{...}, ... });
#define GPIPE_OP_CASES(...)                                       \
  static ::gpipe::testing::OpCaseRegistrar GPIPE_OP_CASES_CONCAT( \
      gpipe_op_cases_, __LINE__)(std::vector<::gpipe::testing::OpCase> __VA_ARGS__)
