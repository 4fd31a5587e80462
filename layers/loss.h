// Losses: the last step of a model, taking the final activation bundle and
// the targets bundle. A Loss returns the SUM of its terms over a (micro-)
// batch plus, separately, how many terms there are; the trainer divides the
// sum over the whole mini-batch by the total count, so a mini-batch cut into
// micro-batches of any sizes gets exactly the mean of the whole mini-batch
// (Note [Micro-batch weighting] in docs/ARCHITECTURE.md).
#pragma once

#include <memory>

#include "layers/layer.h"
#include "ops/loss.h"

namespace gpipe {

class Loss {
 public:
  virtual ~Loss() = default;
  // Scalar tensor: the sum of the per-example (or per-token) losses.
  virtual Tensor sum(const Bundle& outputs, const Bundle& targets) = 0;
  // The number of terms sum() adds for these targets (no compute on outputs).
  virtual double count(const Bundle& targets) const = 0;
  // Mean loss of one batch: sum / count (0 when count is 0).
  Tensor mean(const Bundle& outputs, const Bundle& targets);
  // Whether sum() takes the last layer's 16-bit outputs as they are (it
  // computes in float32 itself). Otherwise a pipeline widens them to float32
  // first, keeping a float32 copy alive until backward (Note [16-bit activations]).
  virtual bool takes_16bit() const { return false; }
  // Whether sum_head takes the last layer's LinearHead (Layer::forward_head)
  // in place of its logits, without materialising them (Note [Fused output
  // loss] in ops/loss.cc). The pipeline's last cell then passes the head.
  virtual bool takes_head() const { return false; }
  // sum({head.logits()}, targets); a loss that takes_head() computes it fused.
  virtual Tensor sum_head(const LinearHead& head, const Bundle& targets);
};

struct CrossEntropyLossOptions {
  int64_t ignore_index = -100;   // target value that contributes nothing (padding)
  double label_smoothing = 0.0;  // in [0, 1)
  double logit_clip = 0.0;       // > 0: logits become c * tanh(logits / c) (soft clipping)
  // Take an output projection's head and fuse the projection into the loss
  // (ops::linear_cross_entropy: no [N, C] logits in training; Note [Fused
  // output loss] in ops/loss.cc). Not with logit_clip, which needs the logits.
  bool fuse_projection = true;
};

// outputs: (logits [..., C]); targets: (labels [...] int32/int64).
class CrossEntropyLoss final : public Loss {
 public:
  explicit CrossEntropyLoss(CrossEntropyLossOptions opt = {}) : opt_(opt) {}
  Tensor sum(const Bundle& outputs, const Bundle& targets) override;
  double count(const Bundle& targets) const override;
  // ops::cross_entropy reads 16-bit logits and computes in float32; soft
  // clipping would round its tanh to 16 bits, so it takes float32.
  bool takes_16bit() const override { return opt_.logit_clip == 0; }
  bool takes_head() const override { return opt_.fuse_projection && opt_.logit_clip == 0; }
  Tensor sum_head(const LinearHead& head, const Bundle& targets) override;

 private:
  CrossEntropyLossOptions opt_;
};

// A model: the layer sequence the pipeline cuts, and the loss at its end.
struct Model {
  LayerList layers;
  std::shared_ptr<Loss> loss;
};

// The mean loss of model m on one batch, on a single device, computed as a
// pipeline computes it: run_layers at the thread's precision, then the loss,
// given the last layer's head where the loss takes_head() (Note [Fused
// output loss] in ops/loss.cc). The single-device reference of training.
Tensor mean_loss(const Model& m, const Bundle& inputs, const Bundle& targets);

}  // namespace gpipe
