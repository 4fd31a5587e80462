// A 2-layer MLP trained with plain SGD on a synthetic classification task,
// written directly against gpipe's tensor, autograd and ops: the smallest
// end-to-end use of the framework. Prints the loss going down.
//   bazel run //examples:mlp_demo
#include <cstdio>

#include "core/autograd.h"
#include "ops/ops.h"

using namespace gpipe;

int main() {
  constexpr int64_t kN = 512, kIn = 16, kHidden = 64, kClasses = 4;
  // Data: the class is which of 4 fixed random directions x is closest to.
  Tensor x = Tensor::randn(Shape{kN, kIn}, 1);
  Tensor centers = Tensor::randn(Shape{kClasses, kIn}, 2);
  Tensor labels = ops::argmax(ops::matmul(x, centers, false, true), 1);

  auto param = [](Shape s, uint64_t seed, double scale) {
    MemoryCategoryGuard cat(MemoryCategory::kParameter);
    Tensor p = Tensor::randn(s, seed, scale);
    p.set_requires_grad(true);
    return p;
  };
  Tensor w1 = param(Shape{kHidden, kIn}, 3, 0.25), b1 = param(Shape{kHidden}, 4, 0.0);
  Tensor w2 = param(Shape{kClasses, kHidden}, 5, 0.125), b2 = param(Shape{kClasses}, 6, 0.0);
  std::vector<Tensor> params{w1, b1, w2, b2};

  const double lr = 0.5;
  for (int step = 0; step <= 200; ++step) {
    Tensor logits = ops::linear(ops::relu(ops::linear(x, w1, b1)), w2, b2);
    Tensor loss = ops::cross_entropy(logits, labels);
    loss.backward();
    {
      NoGradGuard no_grad;
      for (Tensor& p : params) {
        p.copy_from(ops::sub(p, ops::mul_scalar(p.grad(), lr)));
        p.zero_grad();
      }
    }
    if (step % 20 == 0) {
      NoGradGuard no_grad;
      const auto pred = ops::argmax(logits, 1).to_vector<int64_t>();
      const auto truth = labels.to_vector<int64_t>();
      int correct = 0;
      for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == truth[i];
      std::printf("step %3d  loss %.4f  train accuracy %.1f%%\n", step, loss.item(),
                  100.0 * correct / kN);
    }
  }
  return 0;
}
