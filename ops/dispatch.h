// Kernel dispatch: one slot per kernel, one function pointer per device kind.
//
// A front function (ops::matmul, ops::layer_norm, ...) validates its inputs,
// allocates outputs, calls the kernel through its slot, and records the
// backward with autograd. A device kind without a kernel is a readable error:
//   op 'conv2d_forward' has no kernel for cuda
// Kernels register themselves at static-initialisation time from their
// device's source files (ops/cpu/*.cc, ops/cuda/*.cu), which are linked with
// alwayslink so the registrations are never dropped.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/error.h"

namespace gpipe::ops {

// Records that kernel `name` exists for `type` (the op table test reads this).
void note_kernel(const char* name, DeviceType type);
// Names of all kernels registered for `type`, sorted.
std::vector<std::string> registered_kernels(DeviceType type);

// Kernels a device may leave out because the op's front function falls back
// to a composed form of other ops there (the fused ops: ops::attention). The
// CUDA build test accepts their absence; everything else must exist on
// every device.
void note_optional_kernel(const char* name);
bool is_optional_kernel(const std::string& name);

template <class Sig>
class KernelSlot;

template <class R, class... Args>
class KernelSlot<R(Args...)> {
 public:
  using Fn = R (*)(Args...);
  constexpr explicit KernelSlot(const char* name) : name_(name) {}

  bool set(DeviceType type, Fn fn) {
    fns_[static_cast<int>(type)] = fn;
    note_kernel(name_, type);
    return true;
  }
  bool has(DeviceType type) const { return fns_[static_cast<int>(type)] != nullptr; }
  const char* name() const { return name_; }

  // Runs the kernel registered for `device`'s kind.
  template <class... A>
  R operator()(Device device, A&&... args) const {
    Fn f = fns_[static_cast<int>(device.type)];
    GPIPE_CHECK(f != nullptr, "op '", name_, "' has no kernel for ", device_type_name(device.type),
                device.is_cuda() ? " (not implemented for CUDA, or gpipe built without CUDA)" : "");
    return f(std::forward<A>(args)...);
  }

 private:
  const char* name_;
  Fn fns_[kNumDeviceTypes] = {};
};

}  // namespace gpipe::ops

// In a header: declares the slot `name` with signature `Sig`.
#define GPIPE_DECLARE_KERNEL(name, ...) \
  inline constinit ::gpipe::ops::KernelSlot<__VA_ARGS__> name { #name }

// In a device source file: registers `fn` in slot `slot` for that device kind.
#define GPIPE_REGISTER_KERNEL(slot, device_type, fn)                  \
  [[maybe_unused]] static const bool gpipe_registered_##slot##_##fn = \
      ::gpipe::ops::slot.set(device_type, fn)
