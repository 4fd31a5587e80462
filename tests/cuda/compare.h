// The CPU-against-cuda:0 comparison the CUDA op tests share (ops_test.cc,
// attention_test.cc): run a function of tensors on CPU inputs and on cuda:0
// copies of them, in one dtype, and check that outputs and gradients agree
// (tolerances: tests/cuda/ops_test.cc's header).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace gpipe::testing {

inline const Device kGpu{DeviceType::kCUDA, 0};

using In = std::vector<Tensor>;
using Fn = std::function<In(const In&)>;

// max |a - b| / max(1, |b|) over all elements (NaN in the same place on both
// sides agrees; NaN on one side only is infinitely wrong); also reports where.
double rel_err(const Tensor& a, const Tensor& b, int64_t* at = nullptr);

// CHECKs that `gpu` (on cuda:0) and `cpu` have one shape and dtype and agree within tol.
void check_same(const std::string& what, const Tensor& gpu, const Tensor& cpu, double tol);

// Inputs converted to `dtype` (floating ones) and moved to `device`, as fresh leaves.
In prepare(const In& in, DType dtype, Device device);

// Runs fn forward without grad, then forward + backward of sum(out_i * R_i)
// with R_i = rand64(seed 1000 + i); returns outputs followed by the gradients
// of the inputs listed in `which` (undefined where no gradient arrived).
In run_op(const Fn& fn, const In& inputs, const std::vector<int>& which, bool grads, DType dtype,
          Device device);

// `listed`, or every floating input when it is empty.
std::vector<int> float_inputs(const In& in, const std::vector<int>& listed);

// fn on CPU and on cuda:0, same inputs; outputs and gradients must agree within tol.
void compare(const std::string& name, const Fn& fn, const In& inputs, DType dtype, double tol,
             bool grads = true, std::vector<int> which = {});

}  // namespace gpipe::testing
