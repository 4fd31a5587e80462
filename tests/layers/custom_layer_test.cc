// A layer a user writes from ops:: calls gets gradients, partitioning,
// placement and rematerialisation with no extra code (examples/custom_layer.h).
#include "examples/custom_layer.h"

#include <catch2/catch.hpp>

#include "pipeline/pipeline.h"

using namespace gpipe;

TEST_CASE("custom layer: finite-difference gradients and pipeline equivalence") {
  // Gradient check in float64 on the layer alone.
  examples::GatedLinearUnit glu("glu", 3, 2, 5);
  for (Tensor* p : {&glu.value_weight, &glu.value_bias, &glu.gate_weight, &glu.gate_bias})
    *p = make_parameter(p->to(DType::kFloat64));
  Tensor x = Tensor::randn(Shape{4, 3}, 9, 1.0, DType::kFloat64);
  Tensor proj = Tensor::randn(Shape{4, 2}, 10, 1.0, DType::kFloat64);
  auto f = [&] { return ops::sum(ops::mul(glu.forward(x), proj)); };
  f().backward();
  NoGradGuard ng;
  for (Tensor* p : {&glu.value_weight, &glu.gate_weight, &glu.gate_bias}) {
    const auto analytic = p->grad().to_vector<double>();
    double* d = p->data<double>();
    for (int64_t i = 0; i < p->numel(); ++i) {
      const double orig = d[i];
      d[i] = orig + 1e-6;
      const double fp = f().item();
      d[i] = orig - 1e-6;
      const double fm = f().item();
      d[i] = orig;
      CHECK(analytic[i] == Approx((fp - fm) / 2e-6).margin(1e-7));
    }
  }
}

TEST_CASE("custom layer: a pipeline of custom layers matches single-device training") {
  const Batch batch{{Tensor::randn(Shape{10, 6}, 1)},
                    {Tensor::from_vector<int64_t>({0, 1, 2, 0, 1, 2, 0, 1, 2, 0}, Shape{10})}};
  Model ref = examples::glu_classifier(6, 8, 3, 3, 4);
  ref.loss->mean(run_layers(ref.layers, batch.inputs), batch.targets).backward();
  Pipeline pipe(examples::glu_classifier(6, 8, 3, 3, 4),
                {.K = 2, .M = 3, .remat = RematMode::kAlways}, batch);
  CHECK(pipe.partition().cells() == 2);
  pipe.train_step(batch);
  auto got = pipe.parameters();
  size_t i = 0;
  for (auto& l : ref.layers)
    for (auto& p : l->parameters()) {
      INFO(got[i].name);
      const auto a = got[i++].tensor->grad().to_vector<float>(),
                 b = p.tensor->grad().to_vector<float>();
      for (size_t j = 0; j < a.size(); ++j) CHECK(a[j] == Approx(b[j]).margin(1e-6));
    }
  CHECK(i == got.size());
}
