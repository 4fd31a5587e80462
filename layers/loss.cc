#include "layers/loss.h"

#include "ops/ops.h"

namespace gpipe {

Tensor Loss::mean(const Bundle& outputs, const Bundle& targets) {
  const double n = count(targets);
  Tensor s = sum(outputs, targets);
  return ops::mul_scalar(s, n > 0 ? 1.0 / n : 0.0);
}

Tensor CrossEntropyLoss::sum(const Bundle& outputs, const Bundle& targets) {
  GPIPE_CHECK(outputs.size() == 1 && targets.size() == 1,
              "CrossEntropyLoss: expected (logits) and (labels), got ", outputs.size(),
              " outputs and ", targets.size(), " targets");
  Tensor logits = outputs[0];
  if (opt_.logit_clip > 0)
    logits =
        ops::mul_scalar(ops::tanh(ops::mul_scalar(logits, 1.0 / opt_.logit_clip)), opt_.logit_clip);
  const Tensor& labels = targets[0];
  GPIPE_CHECK(logits.rank() == labels.rank() + 1, "CrossEntropyLoss: logits ", logits.shape(),
              " do not match labels ", labels.shape(),
              " (expected logits [..., C] for labels [...])");
  Tensor flat_logits = ops::reshape(logits, {-1, logits.size(-1)});
  Tensor flat_labels = ops::reshape(labels, {-1});
  ops::CrossEntropyOptions o;
  o.ignore_index = opt_.ignore_index;
  o.label_smoothing = opt_.label_smoothing;
  return ops::mul_scalar(ops::cross_entropy(flat_logits, flat_labels, o), count(targets));
}

Tensor Loss::sum_head(const LinearHead& head, const Bundle& targets) {
  return sum(head.logits(), targets);
}

Tensor CrossEntropyLoss::sum_head(const LinearHead& head, const Bundle& targets) {
  if (!takes_head()) return Loss::sum_head(head, targets);
  GPIPE_CHECK(targets.size() == 1, "CrossEntropyLoss: expected one target tensor (labels), got ",
              targets.size());
  const Tensor& labels = targets[0];
  GPIPE_CHECK(head.hidden.rank() == labels.rank() + 1,
              "CrossEntropyLoss: the output layer's input ", head.hidden.shape(),
              " does not match labels ", labels.shape(), " (expected [..., d] for labels [...])");
  ops::CrossEntropyOptions o;
  o.ignore_index = opt_.ignore_index;
  o.label_smoothing = opt_.label_smoothing;
  PrecisionScope precision(head.precision);
  return ops::mul_scalar(ops::linear_cross_entropy(head.hidden, head.weight, labels, o),
                         count(targets));
}

Tensor mean_loss(const Model& m, const Bundle& inputs, const Bundle& targets) {
  std::optional<LinearHead> head;
  const Bundle out = run_layers(m.layers, inputs, m.loss->takes_head() ? &head : nullptr);
  if (!head) return m.loss->mean(out, targets);
  const double n = m.loss->count(targets);
  return ops::mul_scalar(m.loss->sum_head(*head, targets), n > 0 ? 1.0 / n : 0.0);
}

double CrossEntropyLoss::count(const Bundle& targets) const {
  GPIPE_CHECK(targets.size() == 1, "CrossEntropyLoss: expected one target tensor, got ",
              targets.size());
  const auto v = targets[0].to_vector<int64_t>();
  double n = 0;
  for (int64_t t : v) n += t != opt_.ignore_index;
  return n;
}

}  // namespace gpipe
