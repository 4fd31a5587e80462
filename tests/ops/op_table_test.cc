// Runs every registered OpCase: forward against its reference, gradients
// against central finite differences in float64, and checks that every CPU
// kernel is covered by some case. See tests/ops/op_table.h.
#include "tests/ops/op_table.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <set>
#include <sstream>

#include "core/autograd.h"
#include "core/cpu_isa.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace gpipe::testing {
namespace {

// sum_i <out_i, R_i> with fixed random R_i, as a double.
double projected(const std::vector<Tensor>& outs, const std::vector<Tensor>& proj) {
  double total = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    const auto o = outs[i].to_vector<double>(), r = proj[i].to_vector<double>();
    for (size_t j = 0; j < o.size(); ++j) total += o[j] * r[j];
  }
  return total;
}

void check_gradients(const OpCase& c) {
  std::vector<Tensor> inputs = c.make_inputs();
  std::vector<int> which = c.grad_inputs;
  if (which.empty())
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].defined() && is_floating(inputs[i].dtype()))
        which.push_back(static_cast<int>(i));
  for (int i : which) {
    REQUIRE(inputs[i].dtype() == DType::kFloat64);
    inputs[i] = inputs[i].clone();
    inputs[i].set_requires_grad(true);
  }
  std::vector<Tensor> outs = c.fn(inputs);
  std::vector<Tensor> proj;
  for (size_t i = 0; i < outs.size(); ++i)
    proj.push_back(rand64(outs[i].shape(), 1000 + i, -1.0, 1.0));
  std::vector<Tensor> roots, grads;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].requires_grad()) continue;
    roots.push_back(outs[i]);
    grads.push_back(proj[i]);
  }
  REQUIRE_FALSE(roots.empty());
  backward(roots, grads);

  NoGradGuard no_grad;
  for (int i : which) {
    Tensor analytic = inputs[i].grad();
    INFO("input " << i << " of shape " << inputs[i].shape());
    REQUIRE(analytic.defined());
    REQUIRE(analytic.shape() == inputs[i].shape());
    const auto av = analytic.to_vector<double>();
    double* x = inputs[i].data<double>();
    double worst = 0;
    int64_t worst_at = -1;
    double worst_num = 0;
    for (int64_t e = 0; e < inputs[i].numel(); ++e) {
      const double orig = x[e];
      x[e] = orig + c.eps;
      const double fp = projected(c.fn(inputs), proj);
      x[e] = orig - c.eps;
      const double fm = projected(c.fn(inputs), proj);
      x[e] = orig;
      const double numeric = (fp - fm) / (2 * c.eps);
      const double err = std::abs(av[e] - numeric) / std::max(1.0, std::abs(numeric));
      if (err > worst) {
        worst = err;
        worst_at = e;
        worst_num = numeric;
      }
    }
    INFO("worst element " << worst_at << ": analytic " << (worst_at >= 0 ? av[worst_at] : 0.0)
                          << " vs numeric " << worst_num);
    CHECK(worst <= c.tolerance);
  }
}

// Outputs and (if the case has gradients) the gradients of sum(out * R)
// w.r.t. its float inputs, with every float input cast to `dtype` first;
// all returned in float64. With `rounded` (a 16-bit dtype), the inputs and
// the R_i hold values of that format: a float64 run on them is the exact
// reference for a run in that format.
struct Run {
  std::vector<Tensor> outs, grads;
};
Run run_as(const OpCase& c, DType dtype, std::optional<DType> rounded = std::nullopt) {
  auto round = [&](const Tensor& t) { return rounded ? t.to(*rounded) : t; };
  std::vector<Tensor> inputs = c.make_inputs();
  std::vector<int> floats;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && is_floating(inputs[i].dtype())) {
      inputs[i] = round(inputs[i]).to(dtype);
      floats.push_back(static_cast<int>(i));
    }
  const std::vector<int> which = c.grad_inputs.empty() ? floats : c.grad_inputs;
  if (c.check_grad)
    for (int i : which) inputs[i].set_requires_grad(true);
  Run r;
  std::vector<Tensor> outs = c.fn(inputs);
  if (c.check_grad) {
    std::vector<Tensor> roots, seeds;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!outs[i].requires_grad()) continue;
      roots.push_back(outs[i]);
      seeds.push_back(round(rand64(outs[i].shape(), 1000 + i, -1.0, 1.0)).to(outs[i].dtype()));
    }
    if (!roots.empty()) backward(roots, seeds);
    for (int i : which)
      r.grads.push_back(inputs[i].grad().defined() ? inputs[i].grad().to(DType::kFloat64)
                                                   : Tensor());
  }
  NoGradGuard no_grad;
  for (const Tensor& o : outs)
    r.outs.push_back(o.defined() && is_floating(o.dtype()) ? o.to(DType::kFloat64) : o);
  return r;
}

// max |a - b| / max(1, max |b|).
double relative_error(const Tensor& a, const Tensor& b) {
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  double scale = 1, worst = 0;
  for (double v : bv) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < av.size(); ++i) worst = std::max(worst, std::abs(av[i] - bv[i]));
  return worst / scale;
}

// `got` against the float64 reference `ref`, outputs and gradients:
// relative_error <= tol; `unit` (> 0) reports the error in those units.
void check_run(const Run& got, const Run& ref, double tol, double unit = 0) {
  auto check = [&](const Tensor& g, const Tensor& r) {
    REQUIRE(g.defined() == r.defined());
    if (!r.defined()) return;
    INFO("of shape " << r.shape());
    REQUIRE(g.shape() == r.shape());
    const double err = relative_error(g, r);
    INFO("relative error " << err
                           << (unit > 0 ? " = " + std::to_string(err / unit) + " unit roundoffs"
                                        : std::string()));
    CHECK(err <= tol);
  };
  REQUIRE(got.outs.size() == ref.outs.size());
  for (size_t i = 0; i < ref.outs.size(); ++i) {
    INFO("output " << i);
    check(got.outs[i], ref.outs[i]);
  }
  REQUIRE(got.grads.size() == ref.grads.size());
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    INFO("gradient " << i);
    check(got.grads[i], ref.grads[i]);
  }
}

void check_float32(const OpCase& c) {
  check_run(run_as(c, DType::kFloat32), run_as(c, DType::kFloat64), c.tolerance32);
}

// Every float input in a 16-bit dtype (Note [16-bit kernels] in
// ops/dispatch.h): outputs and gradients against float64 on the same
// rounded values, within tolerance16 unit roundoffs of the format (bfloat16
// 2^-8, float16 2^-11) times max(1, max |reference|). Each op rounds its
// outputs once and the input's gradient once; a case that chains ops rounds
// between them, hence a few units.
void check_16bit(const OpCase& c, DType half) {
  INFO("every float input in " << half);
  const double unit = half == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  check_run(run_as(c, half, half), run_as(c, DType::kFloat64, half), c.tolerance16 * unit, unit);
}

// Note [Split backward] in core/autograd_engine.cc: for each float input taken as the only "input"
// (the others as weights), and for none, backward_input followed by
// WeightGradients::run() gives exactly the full backward's gradients, and
// backward_input alone fills the input's gradient and defers all others.
void check_split(const OpCase& c) {
  const std::vector<Tensor> base = c.make_inputs();
  std::vector<int> which = c.grad_inputs;
  if (which.empty())
    for (size_t i = 0; i < base.size(); ++i)
      if (base[i].defined() && is_floating(base[i].dtype())) which.push_back(static_cast<int>(i));
  auto leaves = [&] {
    std::vector<Tensor> in;
    for (const Tensor& t : base) in.push_back(t.defined() ? t.clone() : t);
    for (int i : which) in[i].set_requires_grad(true);
    return in;
  };
  auto roots_of = [&](const std::vector<Tensor>& outs, std::vector<Tensor>& seeds) {
    std::vector<Tensor> roots;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!outs[i].requires_grad()) continue;
      roots.push_back(outs[i]);
      seeds.push_back(rand64(outs[i].shape(), 1000 + i, -1.0, 1.0));
    }
    return roots;
  };
  std::vector<Tensor> full = leaves(), seeds;
  const std::vector<Tensor> full_roots = roots_of(c.fn(full), seeds);
  REQUIRE_FALSE(full_roots.empty());
  backward(full_roots, seeds);
  std::vector<int> as_input = which;
  as_input.push_back(-1);  // no input: everything is a weight
  for (int input : as_input) {
    INFO("split backward with input " << input << " (-1: none), the other float inputs weights");
    std::vector<Tensor> in = leaves(), s;
    const std::vector<Tensor> roots = roots_of(c.fn(in), s);
    std::vector<Tensor> wanted;
    if (input >= 0) wanted.push_back(in[input]);
    WeightGradients w = backward_input(roots, s, wanted);
    for (int i : which) {
      INFO("after backward_input: gradient of input " << i);
      if (i == input && full[i].grad().defined()) {
        REQUIRE(in[i].grad().defined());
        CHECK(max_abs_diff(in[i].grad(), full[i].grad()) == 0);
      } else if (i != input) {
        CHECK_FALSE(in[i].grad().defined());
      }
    }
    w.run();
    CHECK(w.empty());
    for (int i : which) {
      INFO("after run(): gradient of input " << i);
      REQUIRE(in[i].grad().defined() == full[i].grad().defined());
      if (full[i].grad().defined()) CHECK(max_abs_diff(in[i].grad(), full[i].grad()) == 0);
    }
  }
}

// Every level this CPU supports, best first.
std::vector<CpuIsa> supported_levels() {
  std::vector<CpuIsa> levels;
  for (int i = static_cast<int>(detected_cpu_isa()); i >= 0; --i)
    levels.push_back(static_cast<CpuIsa>(i));
  return levels;
}

}  // namespace

TEST_CASE(
    "op table: every case passes forward, gradient, float32, bfloat16 and float16 checks at every "
    "ISA level, and its split backward (input, then weights) equals the full one") {
  REQUIRE_FALSE(op_cases().empty());
  std::set<std::string> names;
  for (const OpCase& c : op_cases()) {
    INFO("op case " << c.name);
    REQUIRE(names.insert(c.name).second);  // unique names
    SECTION(c.name) {
      for (CpuIsa level : supported_levels()) {
        INFO("CPU ISA level " << cpu_isa_name(level));
        CpuIsaGuard isa(level);
        std::vector<Tensor> inputs = c.make_inputs();
        std::vector<Tensor> outs;
        {
          NoGradGuard no_grad;
          outs = c.fn(inputs);
        }
        REQUIRE(c.check_forward);
        c.check_forward(inputs, outs);
        if (c.check_grad) check_gradients(c);
        check_float32(c);
        if (c.check_16bit)
          for (DType half : {DType::kBFloat16, DType::kFloat16}) check_16bit(c, half);
      }
      if (c.check_grad) check_split(c);
    }
  }
}

TEST_CASE("op table: every CPU kernel has a case") {
  std::set<std::string> covered;
  for (const OpCase& c : op_cases()) covered.insert(c.covers.begin(), c.covers.end());
  for (const std::string& k : ops::registered_kernels(DeviceType::kCPU)) {
    INFO("kernel '" << k
                    << "' is registered for the CPU but no op-table case lists it in `covers`");
    CHECK(covered.count(k) == 1);
  }
}

}  // namespace gpipe::testing
