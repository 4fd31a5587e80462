// A custom layer defined outside gpipe, from ops:: calls only, trained
// through a 2-cell pipeline with 4 micro-batches. Exits 1 unless the loss
// falls to below half of where it started.
//   cd examples/embed && bazel run //:train_custom_layer
#include <cmath>
#include <cstdio>

#include "layers/basic.h"
#include "layers/loss.h"
#include "ops/ops.h"
#include "optim/adam.h"
#include "pipeline/pipeline.h"

namespace {

using namespace gpipe;

// A residual block with RMS normalisation: y = x + W2 tanh(W1 (x / rms(x))).
// Autograd gives its backward; the pipeline places, cuts and remats it.
class RmsResidual final : public UnaryLayer {
 public:
  RmsResidual(std::string name, int64_t dim, int64_t hidden, uint64_t seed)
      : UnaryLayer(std::move(name)) {
    w1 = make_parameter(
        Tensor::randn(Shape{hidden, dim}, seed, 1.0 / std::sqrt(static_cast<double>(dim))));
    w2 = make_parameter(
        Tensor::randn(Shape{dim, hidden}, seed + 1, 0.5 / std::sqrt(static_cast<double>(hidden))));
    register_parameter("w1", &w1);
    register_parameter("w2", &w2);
  }
  Tensor forward(const Tensor& x) override {
    Tensor ms = ops::mean(ops::mul(x, x), {-1}, /*keepdim=*/true);
    Tensor normed = ops::div(x, ops::sqrt(ops::add_scalar(ms, 1e-6)));
    return ops::add(x, ops::linear(ops::tanh(ops::linear(normed, w1)), w2));
  }
  TensorSpec output_spec(const TensorSpec& in) const override { return in; }
  Tensor w1, w2;
};

}  // namespace

int main() {
  const int64_t n = 64, dim = 16, classes = 4;
  Tensor x = Tensor::randn(Shape{n, dim}, 1);
  Tensor labels =
      ops::argmax(ops::matmul(x, Tensor::randn(Shape{classes, dim}, 2), false, true), 1);
  const Batch batch{{x}, {labels}};

  Model model;
  for (int i = 0; i < 4; ++i)
    model.layers.push_back(
        std::make_shared<RmsResidual>("block_" + std::to_string(i), dim, 32, 10 + i));
  model.layers.push_back(std::make_shared<Linear>("head", dim, classes, 99));
  model.loss = std::make_shared<CrossEntropyLoss>();

  Pipeline pipe(std::move(model), {.K = 2, .M = 4}, batch);
  std::printf("%s", pipe.describe().c_str());
  optim::Adam opt(pipe.parameters(), {.lr = 3e-3});
  double first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    const StepResult r = pipe.train_step(batch);
    opt.step();
    pipe.zero_grad();
    if (step == 0) first = r.loss;
    last = r.loss;
    if (step % 20 == 0) std::printf("step %3d  loss %.4f\n", step, r.loss);
  }
  std::printf("loss %.4f -> %.4f\n", first, last);
  if (!(last < 0.5 * first)) {
    std::printf("FAILED: the loss did not fall below half of its first value\n");
    return 1;
  }
  return 0;
}
