// Optimizer: the update rule applied to a model's parameters after backward.
//
// An optimizer owns per-parameter state (momentum buffers, moment estimates)
// that lives on the parameter's device, is charged to
// MemoryCategory::kOptimizerState and is created when the optimizer is made.
// Subclasses (Sgd, Adam, AdamW, RmsProp) implement one fused loop per
// parameter; the base class walks the parameters, skips those without a
// gradient, dedupes tied weights and counts steps.
//
// Typical loop:
//   Adam opt(model.parameters(), {.lr = 1e-3});
//   for (int64_t s = 1; ...; ++s) {
//     opt.zero_grad();
//     loss.backward();
//     opt.set_lr(schedule->lr_at(s));
//     opt.step();
//   }
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/bundle.h"
#include "core/tensor.h"
#include "optim/format.h"

namespace gpipe::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update to every parameter whose grad() is defined (others are
  // skipped: neither they nor their state change), then advances step_count().
  // Runs without recording autograd. Throws gpipe::Error naming the parameter
  // if its gradient's dtype or device differs from the parameter's, or if the
  // parameter tensor was replaced (e.g. moved by Layer::to) after the
  // optimizer was made: make the optimizer after placing the model.
  virtual void step();
  // Drops every parameter's gradient (Tensor::zero_grad).
  void zero_grad();

  // "SGD", "Adam", "AdamW", "RMSProp".
  const std::string& name() const { return name_; }
  double lr() const { return lr_; }
  // Throws gpipe::Error naming the optimizer for a negative or non-finite lr.
  void set_lr(double lr);
  // Number of step() calls so far (restored by load_checkpoint).
  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t steps);

  // The unique parameters, each under the first name it was given.
  std::vector<NamedTensor> parameters() const;
  // Every state tensor, named "<param>.<state>": "<param>.step" (an int64
  // scalar counting this parameter's updates, like PyTorch's per-parameter
  // step; beside a CPU parameter, in host memory for an accelerator's) then
  // the optimizer's buffers ("<param>.exp_avg", ...), on the parameter's
  // device. The pointers stay valid for the optimizer's lifetime
  // and may be written through (load_checkpoint does).
  std::vector<NamedTensor> state() const;
  // Hyper-parameters as text ("lr" -> "0.001"), for checkpoint metadata.
  // Doubles print in their shortest exact form, so they read back exactly.
  virtual std::map<std::string, std::string> hyper_params() const;

 protected:
  // `name` is the optimizer's display name, used in every error message.
  // `params` may repeat one tensor under several names (tied weights): it is
  // kept once, under the first name. Every tensor must be defined, float32 or
  // float64, on any device (its state lives there too); two different
  // tensors may not share a name. Throws gpipe::Error naming the optimizer
  // otherwise. A device without the optimizer's kernel fails at step() with
  // the kernel slot's error (CUDA has them: compile-checked, no GPU has run
  // them).
  Optimizer(std::string name, std::vector<NamedTensor> params, double lr);

  // Adds a zero-initialised state buffer shaped like each parameter, named
  // "<param>.<buffer>". Call from the subclass constructor; buffers are
  // handed to update() in the order they were added.
  void add_state_buffer(const std::string& buffer);

  // One parameter's update. `param` and `grad` are contiguous, with the same
  // shape, dtype and device; `step` counts this parameter's updates including
  // this one (1 on its first); `state` holds the add_state_buffer() buffers.
  // If the parameter itself is not contiguous, `param` is a copy that the base
  // class writes back.
  struct Update {
    const std::string& name;
    Tensor& param;
    const Tensor& grad;
    int64_t step;
    std::vector<Tensor>& state;
  };
  virtual void update(const Update& u) = 0;
  // The updates of one step, all at once: an optimizer may fuse them into
  // one multi-tensor pass (gpipe's do, with for_each_piece); the default
  // calls update() on each.
  virtual void update_all(const std::vector<Update>& updates);

 public:
  // Update work dispatched to devices since construction: per step, one for
  // all CPU parameters and one per device with a multi-tensor kernel (one
  // per tensor elsewhere). What the structural test of a step counts.
  int64_t update_dispatches() const { return dispatches_; }

 protected:
  // Note [Multi-tensor updates]: runs piece(i, lo, hi) over elements [lo, hi)
  // of updates[i], for every element of every update. A model has many small
  // tensors (biases, norms); a parallel_for each would run most of them on
  // one thread and pay a dispatch per tensor. So the CPU parameters are laid
  // end to end as one range, cut into chunks of about 16K elements across the
  // intra-op pool, and each chunk calls piece() for the parts of the tensors
  // it covers; a parameter on another device is one piece (Adam passes the
  // parameters of a device with a multi-tensor kernel, CUDA, to
  // ops::adam_update_many instead: all of them in one launch per dtype).
  // Element updates are independent, so the result equals one pass per
  // tensor bit for bit.
  // `kernel` names the slot piece() calls: with the kernel profile on, the
  // CPU's joint pass is timed as one call of it (kernel_profile::Within).
  void for_each_piece(const std::vector<Update>& updates, const char* kernel,
                      const std::function<void(size_t i, int64_t lo, int64_t hi)>& piece) const;
  // Counts one dispatch of update work to a device (a multi-tensor launch,
  // the CPU's joint pass, or one tensor's kernel): update_dispatches().
  void count_dispatch() const { ++dispatches_; }

  // Throws gpipe::Error "<optimizer>: <what> must be <requirement>, got <value>"
  // unless `ok`.
  void check_hyper(bool ok, const char* what, const char* requirement, double value) const;

 private:
  mutable int64_t dispatches_ = 0;
  struct Slot {
    std::string name;
    Tensor* param;
    TensorImpl* identity;  // the TensorImpl the state was made for
    Tensor step;           // int64 scalar: the parameter's CPU device, else the host
    std::vector<Tensor> buffers;
  };

  std::string name_;
  double lr_;
  int64_t step_count_ = 0;
  std::vector<std::string> buffer_names_;
  std::vector<Slot> slots_;
};

}  // namespace gpipe::optim
