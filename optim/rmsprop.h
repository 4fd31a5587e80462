// RMSProp, the optimizer of the GPipe paper's AmoebaNet runs, exactly as
// torch.optim.RMSprop (maximize=False):
//
//   g = grad + weight_decay * p
//   sq = alpha * sq + (1 - alpha) * g * g
//   centered: ga = alpha * ga + (1 - alpha) * g; avg = sqrt(sq - ga * ga) + eps
//   otherwise:                                    avg = sqrt(sq) + eps
//   momentum > 0: buf = momentum * buf + g / avg; p -= lr * buf
//   otherwise:    p -= lr * g / avg
//
// Note the PyTorch form: eps is added outside the square root and sq starts
// at zero (TensorFlow's RMSProp puts eps inside and starts sq at one).
// State: "<param>.square_avg", then "<param>.momentum_buffer" if momentum > 0,
// then "<param>.grad_avg" if centered (plus "<param>.step").
#pragma once

#include "optim/optimizer.h"

namespace gpipe::optim {

struct RmsPropOptions {
  double lr = 1e-2;           // >= 0
  double alpha = 0.99;        // decay of the squared-gradient average, in [0, 1)
  double eps = 1e-8;          // > 0
  double momentum = 0.0;      // >= 0
  double weight_decay = 0.0;  // >= 0, L2 penalty added to the gradient
  bool centered = false;      // divide by an estimate of the gradient's variance
};

class RmsProp : public Optimizer {
 public:
  // Throws gpipe::Error "RMSProp: <hyper-parameter> must be ..., got <value>".
  RmsProp(std::vector<NamedTensor> params, RmsPropOptions options = {});
  const RmsPropOptions& options() const { return options_; }
  std::map<std::string, std::string> hyper_params() const override;

 protected:
  void update(const Update& u) override;
  void update_all(const std::vector<Update>& updates) override;

 private:
  RmsPropOptions options_;
};

}  // namespace gpipe::optim
