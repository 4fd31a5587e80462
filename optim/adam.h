// Adam and AdamW, exactly as torch.optim.Adam / torch.optim.AdamW
// (amsgrad=False, maximize=False). With t this parameter's update count:
//
//   Adam:  g = grad + weight_decay * p          (L2 folded into the gradient)
//   AdamW: p *= 1 - lr * weight_decay; g = grad  (decoupled weight decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//
// i.e. p -= lr * m_hat / (sqrt(v_hat) + eps). State: "<param>.exp_avg",
// "<param>.exp_avg_sq" (plus "<param>.step").
#pragma once

#include "optim/optimizer.h"

namespace gpipe::optim {

struct AdamOptions {
  double lr = 1e-3;           // >= 0
  double beta1 = 0.9;         // in [0, 1)
  double beta2 = 0.999;       // in [0, 1)
  double eps = 1e-8;          // > 0
  double weight_decay = 0.0;  // >= 0 (PyTorch's AdamW defaults to 0.01: set it explicitly)
};

class Adam : public Optimizer {
 public:
  // Throws gpipe::Error "Adam: <hyper-parameter> must be ..., got <value>".
  Adam(std::vector<NamedTensor> params, AdamOptions options = {});
  const AdamOptions& options() const { return options_; }
  std::map<std::string, std::string> hyper_params() const override;

 protected:
  Adam(std::string name, std::vector<NamedTensor> params, AdamOptions options, bool decoupled);
  void update(const Update& u) override;
  // Float32 CPU parameters in one multi-tensor pass (Note [Multi-tensor Adam]).
  void update_all(const std::vector<Update>& updates) override;

 private:
  AdamOptions options_;
  bool decoupled_;  // AdamW
};

class AdamW : public Adam {
 public:
  // Throws gpipe::Error "AdamW: <hyper-parameter> must be ..., got <value>".
  AdamW(std::vector<NamedTensor> params, AdamOptions options = {});
};

}  // namespace gpipe::optim
