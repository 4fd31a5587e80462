// Optimizers against hand-computed trajectories on scalar parameters.
//
// Each reference below writes PyTorch's update rule out in double; the first
// step is also checked against a number worked out by hand in a comment.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>

#include "core/allocator.h"
#include "core/tensor.h"
#include "optim/adam.h"
#include "optim/rmsprop.h"
#include "optim/sgd.h"

namespace gpipe::optim {
namespace {

Tensor make_param(std::vector<double> values, DType dtype = DType::kFloat64, Device device = kCpu) {
  Tensor t = Tensor::from_vector(values, Shape{static_cast<int64_t>(values.size())}).to(dtype);
  if (device != kCpu) t = t.to(device);
  t = t.detach();
  t.set_requires_grad(true);
  return t;
}

void give_grad(Tensor& p, std::vector<double> g) {
  Tensor t = Tensor::from_vector(g, p.shape()).to(p.dtype());
  if (p.device() != kCpu) t = t.to(p.device());
  p.set_grad(t.detach());
}

double value(const Tensor& p, int64_t i = 0) { return p.to_vector<double>()[i]; }

// A deterministic gradient of n elements for (step, tensor).
Tensor ops_free_grad(int64_t n, int step, size_t t) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = std::cos(0.003f * i + 0.7f * step + t);
  return Tensor::from_vector(v, Shape{n});
}

double tolerance(DType dtype) { return dtype == DType::kFloat64 ? 1e-13 : 2e-6; }

// Runs `opt` for grads.size() steps on the scalar `p`, comparing to `ref`.
template <class Opt, class Options>
void check_trajectory(Options options, double p0, const std::vector<double>& grads,
                      const std::vector<double>& ref, DType dtype) {
  Tensor p = make_param({p0}, dtype);
  Opt opt({{"p", &p}}, options);
  for (size_t s = 0; s < grads.size(); ++s) {
    give_grad(p, {grads[s]});
    opt.step();
    INFO("step " << s + 1 << ", dtype " << dtype);
    CHECK(value(p) == Approx(ref[s]).epsilon(tolerance(dtype)).margin(1e-12));
  }
  CHECK(opt.step_count() == static_cast<int64_t>(grads.size()));
}

// --- references (PyTorch's documented algorithms, in double) ---

std::vector<double> sgd_ref(SgdOptions o, double p, const std::vector<double>& grads) {
  std::vector<double> out;
  double buf = 0;
  for (size_t t = 0; t < grads.size(); ++t) {
    double g = grads[t] + o.weight_decay * p;
    if (o.momentum != 0) {
      buf = t == 0 ? g : o.momentum * buf + (1 - o.dampening) * g;
      g = o.nesterov ? g + o.momentum * buf : buf;
    }
    p -= o.lr * g;
    out.push_back(p);
  }
  return out;
}

std::vector<double> adam_ref(AdamOptions o, bool decoupled, double p,
                             const std::vector<double>& grads) {
  std::vector<double> out;
  double m = 0, v = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    const double t = static_cast<double>(i + 1);
    double g = grads[i];
    if (decoupled)
      p *= 1 - o.lr * o.weight_decay;
    else
      g += o.weight_decay * p;
    m = o.beta1 * m + (1 - o.beta1) * g;
    v = o.beta2 * v + (1 - o.beta2) * g * g;
    const double m_hat = m / (1 - std::pow(o.beta1, t));
    const double v_hat = v / (1 - std::pow(o.beta2, t));
    p -= o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
    out.push_back(p);
  }
  return out;
}

std::vector<double> rmsprop_ref(RmsPropOptions o, double p, const std::vector<double>& grads) {
  std::vector<double> out;
  double sq = 0, ga = 0, buf = 0;
  for (double grad : grads) {
    const double g = grad + o.weight_decay * p;
    sq = o.alpha * sq + (1 - o.alpha) * g * g;
    double avg;
    if (o.centered) {
      ga = o.alpha * ga + (1 - o.alpha) * g;
      avg = std::sqrt(sq - ga * ga) + o.eps;
    } else {
      avg = std::sqrt(sq) + o.eps;
    }
    if (o.momentum > 0) {
      buf = o.momentum * buf + g / avg;
      p -= o.lr * buf;
    } else {
      p -= o.lr * g / avg;
    }
    out.push_back(p);
  }
  return out;
}

const std::vector<double> kGrads = {1.0, 2.0, -3.0};
const DType kDTypes[] = {DType::kFloat32, DType::kFloat64};

TEST_CASE("SGD: plain, momentum, Nesterov, weight decay, dampening") {
  // Hand-worked: lr 0.1, momentum 0.9, p0 = 1, grads 1, 2, -3:
  //   buf = 1            p = 1 - 0.1 * 1      = 0.9
  //   buf = 0.9 + 2      p = 0.9 - 0.1 * 2.9  = 0.61
  //   buf = 2.61 - 3     p = 0.61 + 0.1 * 0.39 = 0.649
  const SgdOptions momentum{.lr = 0.1, .momentum = 0.9};
  CHECK(sgd_ref(momentum, 1.0, kGrads)[2] == Approx(0.649));
  // Nesterov + L2: step 1: g = 1 + 0.1 * 1 = 1.1, buf = 1.1, g = 1.1 + 0.9 * 1.1 = 2.09,
  // p = 1 - 0.209 = 0.791.
  const SgdOptions nesterov{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1, .nesterov = true};
  CHECK(sgd_ref(nesterov, 1.0, kGrads)[0] == Approx(0.791));
  const SgdOptions configs[] = {
      {.lr = 0.1},
      momentum,
      nesterov,
      {.lr = 0.05, .momentum = 0.5, .dampening = 0.3, .weight_decay = 0.01},
  };
  for (const SgdOptions& o : configs)
    for (DType dt : kDTypes) check_trajectory<Sgd>(o, 1.0, kGrads, sgd_ref(o, 1.0, kGrads), dt);
}

TEST_CASE("Adam and AdamW: bias-corrected steps, L2 vs decoupled decay") {
  // Hand-worked step 1 (any betas): m_hat = g, v_hat = g^2, so
  // p = 1 - lr * g / (|g| + eps) = 1 - 0.1 / (1 + 1e-8).
  const AdamOptions plain{.lr = 0.1};
  CHECK(adam_ref(plain, false, 1.0, kGrads)[0] == Approx(1 - 0.1 / (1 + 1e-8)));
  // Step 2: m = 0.9 * 0.1 + 0.1 * 2 = 0.29, v = 0.999 * 0.001 + 0.001 * 4 = 0.004999,
  // m_hat = 0.29 / 0.19, v_hat = 0.004999 / 0.001999.
  const double p2 =
      (1 - 0.1 / (1 + 1e-8)) - 0.1 * (0.29 / 0.19) / (std::sqrt(0.004999 / 0.001999) + 1e-8);
  CHECK(adam_ref(plain, false, 1.0, kGrads)[1] == Approx(p2).epsilon(1e-12));

  const AdamOptions decay{.lr = 0.1, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.5};
  // The two decays differ: AdamW step 1 is p = 1 * (1 - 0.05) - 0.1 * 1 / (1 + 1e-6).
  CHECK(adam_ref(decay, true, 1.0, kGrads)[0] == Approx(0.95 - 0.1 / (1 + 1e-6)));
  CHECK(adam_ref(decay, false, 1.0, kGrads)[0] != Approx(adam_ref(decay, true, 1.0, kGrads)[0]));
  for (DType dt : kDTypes) {
    check_trajectory<Adam>(plain, 1.0, kGrads, adam_ref(plain, false, 1.0, kGrads), dt);
    check_trajectory<Adam>(decay, 1.0, kGrads, adam_ref(decay, false, 1.0, kGrads), dt);
    check_trajectory<AdamW>(decay, 1.0, kGrads, adam_ref(decay, true, 1.0, kGrads), dt);
  }
}

TEST_CASE("RMSProp: plain, momentum, centered, weight decay") {
  // Hand-worked step 1, alpha 0.9: sq = 0.1 * 1, avg = sqrt(0.1) + eps,
  // p = 1 - 0.01 / (sqrt(0.1) + 1e-8).
  const RmsPropOptions plain{.lr = 0.01, .alpha = 0.9};
  CHECK(rmsprop_ref(plain, 1.0, kGrads)[0] == Approx(1 - 0.01 / (std::sqrt(0.1) + 1e-8)));
  // Centered step 1: ga = 0.1, avg = sqrt(0.1 - 0.01) + eps.
  const RmsPropOptions centered{.lr = 0.01, .alpha = 0.9, .centered = true};
  CHECK(rmsprop_ref(centered, 1.0, kGrads)[0] == Approx(1 - 0.01 / (std::sqrt(0.09) + 1e-8)));
  const RmsPropOptions configs[] = {
      plain,
      centered,
      {.lr = 0.01, .alpha = 0.9, .momentum = 0.9},
      {.lr = 0.02,
       .alpha = 0.8,
       .eps = 1e-3,
       .momentum = 0.5,
       .weight_decay = 0.1,
       .centered = true},
  };
  for (const RmsPropOptions& o : configs)
    for (DType dt : kDTypes)
      check_trajectory<RmsProp>(o, 1.0, kGrads, rmsprop_ref(o, 1.0, kGrads), dt);
}

TEST_CASE("Optimizers update a tied tensor once and keep one state entry") {
  Tensor w = make_param({1.0, 2.0});
  Sgd opt({{"enc.w", &w}, {"dec.w", &w}}, {.lr = 0.1, .momentum = 0.9});
  give_grad(w, {1.0, 1.0});
  opt.step();
  CHECK(value(w, 0) == Approx(0.9));  // once, not 0.8
  CHECK(value(w, 1) == Approx(1.9));
  REQUIRE(opt.parameters().size() == 1);
  CHECK(opt.parameters()[0].name == "enc.w");
  std::vector<std::string> names;
  for (const NamedTensor& s : opt.state()) names.push_back(s.name);
  CHECK(names == std::vector<std::string>{"enc.w.step", "enc.w.momentum_buffer"});
}

TEST_CASE("Parameters without a gradient are skipped, state and step count included") {
  Tensor a = make_param({1.0}), b = make_param({1.0});
  Adam opt({{"a", &a}, {"b", &b}}, {.lr = 0.1});
  give_grad(a, {1.0});
  opt.step();  // b has no gradient
  CHECK(value(b) == 1.0);
  for (const NamedTensor& s : opt.state()) {
    if (s.name.rfind("b.", 0) == 0) CHECK(s.tensor->to_vector<double>()[0] == 0.0);
  }
  // b's first update is its own step 1: bias correction makes it a full lr step.
  give_grad(b, {-4.0});
  a.zero_grad();
  opt.step();
  CHECK(value(b) == Approx(1 + 0.1 * 4 / (4 + 1e-8)));
  CHECK(value(a) == Approx(adam_ref({.lr = 0.1}, false, 1.0, {1.0})[0]));
  CHECK(opt.step_count() == 2);
}

TEST_CASE("Optimizer state lives on the parameter's device and is charged to optimizer state") {
  const Device dev{DeviceType::kCPU, 1};
  Tensor w = make_param({1.0, -1.0, 0.5}, DType::kFloat32, dev);
  const int64_t before = allocator_for(dev).stats().live_bytes(MemoryCategory::kOptimizerState);
  RmsProp opt({{"w", &w}}, {.momentum = 0.9, .centered = true});
  const int64_t after = allocator_for(dev).stats().live_bytes(MemoryCategory::kOptimizerState);
  CHECK(after - before >= 3 * 3 * 4 + 8);  // three buffers of 3 floats + the step
  std::vector<std::string> names;
  for (const NamedTensor& s : opt.state()) {
    names.push_back(s.name);
    CHECK(s.tensor->device() == dev);
    CHECK(s.tensor->storage()->category() == MemoryCategory::kOptimizerState);
  }
  CHECK(names ==
        std::vector<std::string>{"w.step", "w.square_avg", "w.momentum_buffer", "w.grad_avg"});
  give_grad(w, {1.0, 1.0, 1.0});
  opt.step();
  CHECK(w.device() == dev);
  CHECK(value(w) < 1.0);
}

TEST_CASE("A strided (non-contiguous) parameter is updated through its view") {
  Tensor base = Tensor::from_vector<double>({1, 2, 3, 4}, Shape{2, 2});
  Tensor wt = Tensor::make_view(base, Shape{2, 2}, {1, 2}, 0);  // transpose
  wt.set_requires_grad(true);
  Sgd opt({{"wt", &wt}}, {.lr = 1.0});
  wt.set_grad(Tensor::from_vector<double>({0.1, 0.2, 0.3, 0.4}, Shape{2, 2}));
  opt.step();
  // wt[i][j] = base[j][i]; wt -= grad, so base = [[0.9, 1.7], [2.8, 3.6]].
  CHECK(base.to_vector<double>() == std::vector<double>{1 - 0.1, 2 - 0.3, 3 - 0.2, 4 - 0.4});
}

TEST_CASE("A large parameter (split across threads) matches the per-element rule bitwise") {
  const int64_t n = 200000;
  std::vector<float> p0(n), g(n);
  for (int64_t i = 0; i < n; ++i) {
    p0[i] = std::sin(0.001f * i);
    g[i] = std::cos(0.003f * i);
  }
  Tensor p = Tensor::from_vector(p0, Shape{n});
  p.set_requires_grad(true);
  Sgd opt({{"p", &p}}, {.lr = 0.1f, .momentum = 0.9, .weight_decay = 0.01});
  for (int s = 0; s < 2; ++s) {
    p.set_grad(Tensor::from_vector(g, Shape{n}));
    opt.step();
  }
  const std::vector<float> got = p.to_vector<float>();
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    float q = p0[i], buf = 0;
    for (int s = 0; s < 2; ++s) {
      float d = g[i] + 0.01f * q;
      buf = s == 0 ? d : 0.9f * buf + 1.0f * d;
      q -= static_cast<float>(0.1f) * buf;
    }
    mismatches += got[i] != q;
  }
  CHECK(mismatches == 0);
}

// Note [Multi-tensor Adam]: one pass over many float32 tensors (some far
// smaller than a chunk, one spanning several chunks, one float64 taking the
// single-tensor path) equals an optimizer per tensor, bit for bit.
TEST_CASE("Adam's multi-tensor update equals per-tensor updates bitwise") {
  for (bool decoupled : {false, true}) {
    INFO("decoupled " << decoupled);
    const std::vector<int64_t> sizes = {3, 1, 70000, 17, 16384, 5};
    std::vector<Tensor> joint, single;
    for (size_t t = 0; t < sizes.size(); ++t) {
      std::vector<float> v(sizes[t]);
      for (int64_t i = 0; i < sizes[t]; ++i) v[i] = std::sin(0.01f * i + t);
      for (auto* list : {&joint, &single}) {
        Tensor p = Tensor::from_vector(v, Shape{sizes[t]});
        if (t == 3) p = p.to(DType::kFloat64).detach();
        p.set_requires_grad(true);
        list->push_back(p);
      }
    }
    std::vector<NamedTensor> named;
    for (size_t t = 0; t < joint.size(); ++t) named.push_back({"p" + std::to_string(t), &joint[t]});
    const AdamOptions o{.lr = 1e-2, .weight_decay = 0.01};
    std::unique_ptr<Optimizer> all = decoupled ? std::unique_ptr<Optimizer>(new AdamW(named, o))
                                               : std::unique_ptr<Optimizer>(new Adam(named, o));
    std::vector<std::unique_ptr<Optimizer>> each;
    for (size_t t = 0; t < single.size(); ++t) {
      std::vector<NamedTensor> one{{"p", &single[t]}};
      each.push_back(decoupled ? std::unique_ptr<Optimizer>(new AdamW(one, o))
                               : std::unique_ptr<Optimizer>(new Adam(one, o)));
    }
    for (int step = 0; step < 3; ++step) {
      for (size_t t = 0; t < sizes.size(); ++t) {
        if (step == 1 && t == 0) continue;  // a parameter without a gradient this step
        Tensor g = ops_free_grad(sizes[t], step, t).to(joint[t].dtype()).detach();
        joint[t].set_grad(g);
        single[t].set_grad(g.clone());
      }
      all->step();
      for (size_t t = 0; t < sizes.size(); ++t)
        if (single[t].grad().defined()) each[t]->step();
      for (auto& p : joint) p.zero_grad();
      for (auto& p : single) p.zero_grad();
    }
    for (size_t t = 0; t < sizes.size(); ++t) {
      INFO("tensor " << t);
      CHECK(joint[t].to_vector<double>() == single[t].to_vector<double>());
    }
  }
}

TEST_CASE("zero_grad drops gradients; lr can change between steps") {
  Tensor p = make_param({1.0});
  Sgd opt({{"p", &p}}, {.lr = 0.1});
  give_grad(p, {1.0});
  opt.zero_grad();
  CHECK_FALSE(p.grad().defined());
  opt.step();
  CHECK(value(p) == 1.0);
  opt.set_lr(0.5);
  CHECK(opt.lr() == 0.5);
  give_grad(p, {1.0});
  opt.step();
  CHECK(value(p) == 0.5);
  CHECK(opt.hyper_params().at("lr") == "0.5");
}

TEST_CASE("Bad hyper-parameters and inputs throw errors naming the optimizer and value") {
  Tensor p = make_param({1.0});
  const std::vector<NamedTensor> ps{{"p", &p}};
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(Sgd(ps, {.lr = -0.1}), Contains("SGD: lr must be >= 0, got -0.1"));
  CHECK_THROWS_WITH(Sgd(ps, {.momentum = -1}), Contains("SGD: momentum must be >= 0, got -1"));
  CHECK_THROWS_WITH(Sgd(ps, {.nesterov = true}),
                    Contains("SGD: momentum must be > 0 with nesterov"));
  CHECK_THROWS_WITH(Sgd(ps, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                    Contains("SGD: dampening must be 0 with nesterov, got 0.1"));
  CHECK_THROWS_WITH(Adam(ps, {.beta1 = 1.0}), Contains("Adam: beta1 must be in [0, 1), got 1"));
  CHECK_THROWS_WITH(AdamW(ps, {.beta2 = -0.5}),
                    Contains("AdamW: beta2 must be in [0, 1), got -0.5"));
  CHECK_THROWS_WITH(Adam(ps, {.eps = 0}), Contains("Adam: eps must be > 0, got 0"));
  CHECK_THROWS_WITH(Adam(ps, {.weight_decay = -1e-4}),
                    Contains("Adam: weight_decay must be >= 0, got -1e-04"));
  CHECK_THROWS_WITH(Adam(ps, {.lr = NAN}), Contains("Adam: lr must be >= 0, got nan"));
  CHECK_THROWS_WITH(RmsProp(ps, {.alpha = 1.0}),
                    Contains("RMSProp: alpha must be in [0, 1), got 1"));
  CHECK_THROWS_WITH(RmsProp(ps, {.eps = -1}), Contains("RMSProp: eps must be > 0, got -1"));
  Sgd sgd(ps, {});
  CHECK_THROWS_WITH(sgd.set_lr(-1), Contains("SGD: lr must be >= 0, got -1"));

  Tensor idx = Tensor::from_vector<int64_t>({1}, Shape{1});
  CHECK_THROWS_WITH(Sgd({{"idx", &idx}}, {}), Contains("SGD: parameter 'idx' has dtype int64"));
  Tensor q = make_param({1.0});
  CHECK_THROWS_WITH(Sgd({{"p", &p}, {"p", &q}}, {}),
                    Contains("SGD: two different tensors are both named 'p'"));

  // A gradient of the wrong dtype: nothing moves, not even other parameters.
  Tensor r = make_param({1.0});
  Sgd opt({{"r", &r}, {"p", &p}}, {.lr = 0.1});
  give_grad(r, {1.0});
  p.set_grad(Tensor::from_vector<float>({1.0f}, Shape{1}));
  CHECK_THROWS_WITH(
      opt.step(),
      Contains("SGD: parameter 'p' has dtype float64 but its gradient has dtype float32"));
  CHECK(value(r) == 1.0);
  CHECK(opt.step_count() == 0);

  // A parameter replaced after the optimizer was made.
  r = make_param({1.0});
  give_grad(r, {1.0});
  p.zero_grad();
  CHECK_THROWS_WITH(opt.step(), Contains("parameter 'r' was replaced"));
}

}  // namespace
}  // namespace gpipe::optim
