// Optimizer base: parameter bookkeeping shared by every update rule.
//
// Tied weights: Layer::parameters() lists a shared tensor once per owner, so
// the constructor keeps the first entry per TensorImpl. Its gradient already
// holds the sum over every use, so one update per TensorImpl is exact.
//
// Per-parameter steps: like PyTorch, each parameter counts its own updates
// (a parameter without a gradient this step neither moves nor counts), and
// Adam's bias correction uses that count, not the global step_count().
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd.h"
#include "core/parallel.h"
#include "ops/dispatch.h"

namespace gpipe::optim {

Optimizer::Optimizer(std::string name, std::vector<NamedTensor> params, double lr)
    : name_(std::move(name)), lr_(lr) {
  check_hyper(std::isfinite(lr) && lr >= 0, "lr", ">= 0", lr);
  std::unordered_set<TensorImpl*> seen;
  std::unordered_map<std::string, TensorImpl*> by_name;
  MemoryCategoryGuard category(MemoryCategory::kOptimizerState);
  for (const NamedTensor& p : params) {
    GPIPE_CHECK(p.tensor != nullptr && p.tensor->defined(), name_, ": parameter '", p.name,
                "' is undefined");
    const Tensor& t = *p.tensor;
    TensorImpl* id = t.impl_ptr().get();
    auto [it, fresh] = by_name.emplace(p.name, id);
    GPIPE_CHECK(it->second == id, name_, ": two different tensors are both named '", p.name, "'");
    if (!seen.insert(id).second) continue;
    GPIPE_CHECK(is_floating(t.dtype()), name_, ": parameter '", p.name, "' has dtype ", t.dtype(),
                "; optimizers update float32 or float64 tensors");
    // The update runs on the parameter's device (its kernel slot, Note
    // [Multi-tensor updates]). The step count is read on the host every step:
    // beside a CPU parameter, in host memory for an accelerator's.
    const Device counter = t.device().is_cpu() ? t.device() : kCpu;
    Slot slot{p.name, p.tensor, id, Tensor::zeros(Shape{}, DType::kInt64, counter), {}};
    slots_.push_back(std::move(slot));
  }
}

void Optimizer::add_state_buffer(const std::string& buffer) {
  MemoryCategoryGuard category(MemoryCategory::kOptimizerState);
  buffer_names_.push_back(buffer);
  for (Slot& s : slots_) {
    const Tensor& p = *s.param;
    s.buffers.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
  }
}

void Optimizer::check_hyper(bool ok, const char* what, const char* requirement,
                            double value) const {
  GPIPE_CHECK(ok, name_, ": ", what, " must be ", requirement, ", got ", format_double(value));
}

void Optimizer::set_lr(double lr) {
  check_hyper(std::isfinite(lr) && lr >= 0, "lr", ">= 0", lr);
  lr_ = lr;
}

void Optimizer::set_step_count(int64_t steps) {
  GPIPE_CHECK(steps >= 0, name_, ": step count must be >= 0, got ", steps);
  step_count_ = steps;
}

void Optimizer::step() {
  NoGradGuard no_grad;
  // Validate everything first so that a bad gradient leaves no parameter half-stepped.
  std::vector<std::pair<Slot*, Tensor>> todo;
  for (Slot& s : slots_) {
    const Tensor& p = *s.param;
    GPIPE_CHECK(p.defined() && p.impl_ptr().get() == s.identity, name_, ": parameter '", s.name,
                "' was replaced after the optimizer was made (Layer::to moves make new tensors); "
                "make the optimizer after placing the model");
    Tensor grad = p.grad();
    if (!grad.defined()) continue;
    GPIPE_CHECK(grad.dtype() == p.dtype(), name_, ": parameter '", s.name, "' has dtype ",
                p.dtype(), " but its gradient has dtype ", grad.dtype());
    GPIPE_CHECK(grad.device() == p.device(), name_, ": parameter '", s.name, "' is on ", p.device(),
                " but its gradient is on ", grad.device());
    GPIPE_CHECK(grad.shape() == p.shape(), name_, ": parameter '", s.name, "' has shape ",
                p.shape(), " but its gradient has shape ", grad.shape());
    todo.emplace_back(&s, std::move(grad));
  }
  std::vector<Tensor> grads, works;
  grads.reserve(todo.size());
  works.reserve(todo.size());
  std::vector<Update> updates;
  updates.reserve(todo.size());
  for (auto& [s, grad] : todo) {
    int64_t& count = *s->step.data<int64_t>();
    ++count;
    grads.push_back(grad.contiguous());
    works.push_back(s->param->contiguous());  // the parameter itself unless it is a strided view
    updates.push_back(Update{s->name, works.back(), grads.back(), count, s->buffers});
  }
  update_all(updates);
  for (size_t i = 0; i < todo.size(); ++i)
    if (!todo[i].first->param->is_contiguous()) todo[i].first->param->copy_from(works[i]);
  ++step_count_;
}

void Optimizer::update_all(const std::vector<Update>& updates) {
  for (const Update& u : updates) update(u);
}

void Optimizer::for_each_piece(
    const std::vector<Update>& updates, const char* kernel,
    const std::function<void(size_t i, int64_t lo, int64_t hi)>& piece) const {
  constexpr int64_t kGrain = 1 << 14;
  std::vector<size_t> cpu;
  std::vector<int64_t> offset{0};  // element offset of each CPU tensor in the joint range
  for (size_t i = 0; i < updates.size(); ++i) {
    const Tensor& p = updates[i].param;
    if (p.device().is_cpu()) {
      cpu.push_back(i);
      offset.push_back(offset.back() + p.numel());
    } else if (p.numel() > 0) {
      count_dispatch();
      piece(i, 0, p.numel());
    }
  }
  if (cpu.empty()) return;
  count_dispatch();
  // With the profile on: one call on this thread, its bytes every tensor's
  // (parameter, gradient, state) once; the pieces inside do not record.
  std::optional<ops::kernel_profile::Call> whole;
  if (ops::kernel_profile::enabled()) {
    double bytes = 0;
    for (size_t i : cpu) {
      const Update& u = updates[i];
      bytes += static_cast<double>(u.param.nbytes() + u.grad.nbytes());
      for (const Tensor& s : u.state)
        if (s.defined()) bytes += static_cast<double>(s.nbytes());
    }
    whole.emplace(kernel, bytes);
  }
  parallel_for(0, offset.back(), kGrain, [&](int64_t lo, int64_t hi) {
    const ops::kernel_profile::Within inside;
    size_t t = std::upper_bound(offset.begin(), offset.end(), lo) - offset.begin() - 1;
    for (; t < cpu.size() && offset[t] < hi; ++t) {
      const int64_t a = std::max(lo, offset[t]) - offset[t],
                    b = std::min(hi, offset[t + 1]) - offset[t];
      if (a < b) piece(cpu[t], a, b);
    }
  });
}

void Optimizer::zero_grad() {
  for (Slot& s : slots_) s.param->zero_grad();
}

std::vector<NamedTensor> Optimizer::parameters() const {
  std::vector<NamedTensor> out;
  for (const Slot& s : slots_) out.push_back({s.name, s.param});
  return out;
}

std::vector<NamedTensor> Optimizer::state() const {
  // The tensors are the optimizer's own; callers (load_checkpoint) may write
  // their values in place, which is why the pointers are not const.
  std::vector<NamedTensor> out;
  for (const Slot& s : slots_) {
    Slot& slot = const_cast<Slot&>(s);
    out.push_back({s.name + ".step", &slot.step});
    for (size_t i = 0; i < buffer_names_.size(); ++i)
      out.push_back({s.name + "." + buffer_names_[i], &slot.buffers[i]});
  }
  return out;
}

std::map<std::string, std::string> Optimizer::hyper_params() const {
  return {{"lr", format_double(lr_)}};
}

}  // namespace gpipe::optim
