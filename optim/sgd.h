// Stochastic gradient descent with momentum, dampening, Nesterov momentum
// and L2 weight decay, exactly as torch.optim.SGD (maximize=False):
//
//   g = grad + weight_decay * p
//   if momentum != 0:
//     buf = g                                     on the parameter's first update
//     buf = momentum * buf + (1 - dampening) * g  afterwards
//     g = nesterov ? g + momentum * buf : buf
//   p -= lr * g
//
// State: "<param>.momentum_buffer" when momentum != 0 (plus "<param>.step").
#pragma once

#include "optim/optimizer.h"

namespace gpipe::optim {

struct SgdOptions {
  double lr = 1e-3;           // >= 0
  double momentum = 0.0;      // >= 0
  double dampening = 0.0;     // >= 0; must be 0 with nesterov
  double weight_decay = 0.0;  // >= 0, L2 penalty added to the gradient
  bool nesterov = false;      // needs momentum > 0 and dampening == 0
};

class Sgd : public Optimizer {
 public:
  // Throws gpipe::Error "SGD: <hyper-parameter> must be ..., got <value>".
  Sgd(std::vector<NamedTensor> params, SgdOptions options = {});
  const SgdOptions& options() const { return options_; }
  std::map<std::string, std::string> hyper_params() const override;

 protected:
  void update(const Update& u) override;
  void update_all(const std::vector<Update>& updates) override;

 private:
  SgdOptions options_;
};

}  // namespace gpipe::optim
