// Trains a custom-layer classifier (examples/custom_layer.h) through a
// 2-cell pipeline with 4 micro-batches, on synthetic data.
//   bazel run //examples:custom_layer
#include <cstdio>

#include "examples/custom_layer.h"
#include "optim/adam.h"
#include "pipeline/pipeline.h"

using namespace gpipe;

int main() {
  const int64_t n = 64, in = 12, classes = 3;
  Tensor x = Tensor::randn(Shape{n, in}, 1);
  Tensor centers = Tensor::randn(Shape{classes, in}, 2);
  Tensor labels = ops::argmax(ops::matmul(x, centers, false, true), 1);
  const Batch batch{{x}, {labels}};

  Pipeline pipe(examples::glu_classifier(in, 32, classes, 4, 7), {.K = 2, .M = 4}, batch);
  std::printf("%s", pipe.describe().c_str());
  optim::Adam opt(pipe.parameters(), {.lr = 3e-3});
  for (int step = 0; step <= 150; ++step) {
    const StepResult r = pipe.train_step(batch);
    opt.step();
    pipe.zero_grad();
    if (step % 25 == 0) std::printf("step %3d  loss %.4f\n", step, r.loss);
  }
  return 0;
}
