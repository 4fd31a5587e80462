// See tests/cuda/compare.h.
#include "tests/cuda/compare.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>

#include "core/autograd.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {

// max |a - b| / max(1, |b|) over all elements (NaN in the same place on both
// sides agrees; NaN on one side only is infinitely wrong); also reports where.
double rel_err(const Tensor& a, const Tensor& b, int64_t* at) {
  auto values = [](const Tensor& t) {
    return (is_half(t.dtype()) ? t.to(DType::kFloat64) : t).to_vector<double>();
  };
  const auto va = values(a), vb = values(b);
  double worst = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    const bool na = std::isnan(va[i]), nb = std::isnan(vb[i]);
    const double e = na || nb ? (na && nb ? 0.0 : INFINITY)
                              : std::abs(va[i] - vb[i]) / std::max(1.0, std::abs(vb[i]));
    if (e > worst) {
      worst = e;
      if (at) *at = static_cast<int64_t>(i);
    }
  }
  return worst;
}

void check_same(const std::string& what, const Tensor& gpu, const Tensor& cpu, double tol) {
  INFO(what);
  REQUIRE(gpu.defined() == cpu.defined());
  if (!cpu.defined()) return;
  CHECK(gpu.device() == kGpu);
  REQUIRE(gpu.shape() == cpu.shape());
  REQUIRE(gpu.dtype() == cpu.dtype());
  int64_t at = -1;
  const double err = rel_err(gpu, cpu, &at);
  INFO("worst element " << at << " of shape " << cpu.shape() << ": relative error " << err);
  CHECK(err <= tol);
}

// Inputs converted to `dtype` (floating ones) and moved to `device`, as fresh leaves.
In prepare(const In& in, DType dtype, Device device) {
  In out;
  for (const Tensor& t : in) {
    if (!t.defined()) {
      out.push_back(t);
      continue;
    }
    Tensor c = is_floating(t.dtype()) ? t.to(dtype) : t;
    out.push_back(c.to(device).detach());
  }
  return out;
}

// Runs fn forward without grad, then forward + backward of sum(out_i * R_i)
// with R_i = rand64(seed 1000 + i); returns outputs followed by the gradients
// of the inputs listed in `which` (undefined where no gradient arrived).
In run_op(const Fn& fn, const In& inputs, const std::vector<int>& which, bool grads, DType dtype,
          Device device) {
  In in = prepare(inputs, dtype, device);
  In result;
  {
    NoGradGuard no_grad;
    result = fn(in);
  }
  if (!grads) return result;
  for (int i : which) {
    in[i] = in[i].clone().detach();
    in[i].set_requires_grad(true);
  }
  const In outs = fn(in);
  In roots, gs;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].requires_grad()) continue;
    roots.push_back(outs[i]);
    gs.push_back(rand64(outs[i].shape(), 1000 + i, -1.0, 1.0).to(outs[i].dtype()).to(device));
  }
  if (!roots.empty()) backward(roots, gs);
  for (int i : which) result.push_back(in[i].grad());
  return result;
}

std::vector<int> float_inputs(const In& in, const std::vector<int>& listed) {
  if (!listed.empty()) return listed;
  std::vector<int> which;
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i].defined() && is_floating(in[i].dtype())) which.push_back(static_cast<int>(i));
  return which;
}

// fn on CPU and on cuda:0, same inputs; outputs and gradients must agree within tol.
void compare(const std::string& name, const Fn& fn, const In& inputs, DType dtype, double tol,
             bool grads, std::vector<int> which) {
  which = float_inputs(inputs, which);
  const In cpu = run_op(fn, inputs, which, grads, dtype, kCpu);
  const In gpu = run_op(fn, inputs, which, grads, dtype, kGpu);
  REQUIRE(cpu.size() == gpu.size());
  const size_t n_out = cpu.size() - (grads ? which.size() : 0);
  for (size_t i = 0; i < cpu.size(); ++i) {
    const std::string what = i < n_out
                                 ? name + ": output " + std::to_string(i)
                                 : name + ": gradient of input " + std::to_string(which[i - n_out]);
    check_same(what + " (" + std::string(dtype_name(dtype)) + ")", gpu[i], cpu[i], tol);
  }
}

}  // namespace gpipe::testing
