// Cross-entropy front: one fused kernel computes the row log-sum-exps and
// the loss; backward recomputes the softmax from the logits and the saved
// log-sum-exps (no [N, C] probability tensor is kept alive).
#include "ops/loss.h"

#include "core/autograd.h"
#include "ops/common.h"
#include "ops/loss_kernels.h"

namespace gpipe::ops {

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& opt) {
  detail::check_floating("cross_entropy", logits, "the logits");
  GPIPE_CHECK(logits.rank() >= 1, "cross_entropy: expected logits [N, C], got a scalar");
  GPIPE_CHECK(targets.defined(), "cross_entropy: targets is an undefined tensor");
  GPIPE_CHECK(is_integral(targets.dtype()), "cross_entropy: expected int32 or int64 targets, got ",
              targets.dtype());
  GPIPE_CHECK(targets.device() == logits.device(), "cross_entropy: targets are on ",
              targets.device(), " but the logits are on ", logits.device());
  std::vector<int64_t> lead(logits.shape().dims().begin(), logits.shape().dims().end() - 1);
  GPIPE_CHECK(targets.shape() == Shape(lead), "cross_entropy: expected targets of shape ",
              Shape(lead), " (logits ", logits.shape(), " without the class axis), got ",
              targets.shape());
  GPIPE_CHECK(logits.size(-1) > 0, "cross_entropy: logits ", logits.shape(), " have no classes");
  GPIPE_CHECK(opt.label_smoothing >= 0.0 && opt.label_smoothing <= 1.0,
              "cross_entropy: label_smoothing must be in [0, 1], got ", opt.label_smoothing);

  const Tensor xd = detail::dense(logits);
  const Tensor td = detail::dense(targets);
  const int64_t rows = logits.numel() / logits.size(-1);
  // The loss and the log-sum-exps in float32 for 16-bit logits.
  Tensor loss = Tensor::empty(Shape{}, detail::compute_dtype(logits), logits.device());
  Tensor lse = Tensor::empty({rows}, detail::compute_dtype(logits), logits.device());
  cross_entropy_forward(logits.device(), xd, td, opt.ignore_index, opt.label_smoothing, loss, lse);

  record("cross_entropy", {logits}, loss,
         [xs = xd.detach(), ts = td.detach(), lse, opt](const std::vector<Tensor>& g) {
           Tensor gx = Tensor::empty(xs.shape(), xs.dtype(), xs.device());
           cross_entropy_backward(xs.device(), xs, ts, lse, detail::dense(g[0]), opt.ignore_index,
                                  opt.label_smoothing, gx);
           return std::vector<Tensor>{gx};
         });
  return loss;
}

}  // namespace gpipe::ops
