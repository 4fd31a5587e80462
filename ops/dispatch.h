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

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"

namespace gpipe::ops {

// Records that kernel `name` exists for `type` (the op table test reads this).
void note_kernel(const char* name, DeviceType type);
// Names of all kernels registered for `type`, sorted.
std::vector<std::string> registered_kernels(DeviceType type);

// Kernels a device may leave out because the op's front function falls back
// to a composed form of other ops there (the fused ops: ops::attention), or
// because the device has its own path (accumulate_into: core's CPU gradient
// sum; CUDA sums through register_accumulate). The CUDA build test accepts
// their absence; everything else must exist on every device.
void note_optional_kernel(const char* name);
bool is_optional_kernel(const std::string& name);

// Note [16-bit kernels]. A kernel computes in float32 or float64 unless it
// is registered as taking a 16-bit dtype on its device (accept_16bit):
// cast_into and cross-entropy everywhere; on the CPU the GEMM and the
// one-group convolution in bfloat16, bias + activation, layer norm and the
// gradient sum (accumulate_into); on CUDA the
// bfloat16 GEMM and convolution and, for both 16-bit dtypes, the elementwise ops and their
// gradients, softmax, layer norm, dropout, masked_fill, the embedding
// gather and the sums. Those load 16-bit elements as float32 and round each
// output once (compute_t in runtime/cuda/half.cuh, load_float / store_float
// in ops/cpu/isa/prelude.h), so they compute what the float32 kernels
// compute on widened copies without the copies. For any other
// kernel, a call with 16-bit tensors runs it on float32 copies: each
// 16-bit input is widened into a float32 scratch tensor, each 16-bit
// output (a `Tensor&` argument) is computed in a float32 scratch tensor
// (widened from the output first, so outputs that accumulate keep their
// contents) and rounded back into it when the kernel returns. The scratch lives only for the
// call: what front functions keep for backward stays 16-bit, so activation
// memory is 16-bit while every kernel computes in float32, on every device,
// with no per-dtype kernel to write. Tensors inside other arguments
// (vectors of tensors: the optimizers' parameter lists) are not adapted.
namespace half_args {
bool half_tensor(const Tensor& t);
// The conversion the scratch copies use: Tensor::copy_from until the ops
// library installs the cast_into kernels (ops/common.cc).
using CastHook = void (*)(const Tensor& src, Tensor& dst);
void set_cast_hook(CastHook hook);
// A contiguous float32 copy of a 16-bit tensor (the widening scratch).
Tensor widen_for_kernel(const Tensor& t);
// Rounds the float32 scratch `wide` back into the 16-bit `out`.
void narrow_from_kernel(const Tensor& wide, Tensor& out);

template <class P>
struct HalfArg {  // any other argument: passed through
  P value;
  explicit HalfArg(P v) : value(std::forward<P>(v)) {}
  P get() { return std::forward<P>(value); }
  void finish() {}
};
template <>
struct HalfArg<const Tensor&> {
  Tensor t;
  explicit HalfArg(const Tensor& x) : t(half_tensor(x) ? widen_for_kernel(x) : x) {}
  const Tensor& get() { return t; }
  void finish() {}
};
template <>
struct HalfArg<Tensor&> {
  Tensor& out;
  Tensor wide;
  explicit HalfArg(Tensor& x) : out(x) {
    if (half_tensor(x)) wide = widen_for_kernel(x);
  }
  Tensor& get() { return wide.defined() ? wide : out; }
  void finish() {
    if (wide.defined()) narrow_from_kernel(wide, out);
  }
};

template <class A>
bool is_f16_arg(const A& a) {
  if constexpr (std::is_same_v<std::remove_cvref_t<A>, Tensor>)
    return half_tensor(a) && a.dtype() != DType::kBFloat16;
  else
    return false;
}
template <class A>
bool is_bf16_arg(const A& a) {
  if constexpr (std::is_same_v<std::remove_cvref_t<A>, Tensor>)
    return a.defined() && a.dtype() == DType::kBFloat16;
  else
    return false;
}
}  // namespace half_args

// Note [Kernel profile]. While enabled (kernel_profile::set_enabled), every
// call through a kernel slot is timed and charged to the slot's name, with
// the bytes of its tensor arguments (inputs read plus outputs written: the
// least memory traffic the call can have). Calls made inside another slot's
// call (the 16-bit scratch casts of Note [16-bit kernels]) count toward the
// outer one only. Slots that return a value (the *_takes queries, which
// move no data) are not timed. Disabled, a call pays one relaxed atomic load.
// gpipe_bench profile prints it against the step and the measured bandwidth.
// On CUDA a call returns when its kernels are queued: there it times the
// host's side (launch and checks), not the device's.
namespace kernel_profile {
struct Entry {
  std::string name;
  int64_t calls = 0;
  double seconds = 0;
  double bytes = 0;
};
inline std::atomic<bool> g_active{false};
inline bool enabled() { return g_active.load(std::memory_order_relaxed); }
void set_enabled(bool on);
void reset();
std::vector<Entry> snapshot();  // by time, longest first

// A finer account of a slot's calls, listed apart from the slots (one GEMM
// shape: its calls, seconds and FLOPs for a rate), with the slot it times.
// Recorded around the slot's call (detailed()) while the profile is enabled.
struct Detail {
  std::string name;
  std::string slot;  // the kernel slot whose calls these are ("batched_gemm")
  int64_t calls = 0;
  double seconds = 0, flops = 0;
};
void add_detail(const std::string& name, const std::string& slot, double seconds, double flops);
std::vector<Detail> details();  // by time, longest first

// Times one call (only the outermost on this thread records).
class Call {
 public:
  Call(const char* name, double bytes);
  ~Call();
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

 private:
  const char* name_;
  double bytes_;
  int64_t start_ns_;
  bool outer_;
};

// Marks this thread as inside a call that another thread times: calls made
// while it lives do not record. A joint pass over many tensors split across
// the pool (Note [Multi-tensor updates] in optim/optimizer.h) is timed once
// on the calling thread, so the table shows its wall time, not the sum of
// every worker's share.
class Within {
 public:
  Within();
  ~Within();
  Within(const Within&) = delete;
  Within& operator=(const Within&) = delete;
};

// Runs `call` (one call through `slot`); with the profile on, also records
// its time and `flops` as a detail named name() (built only then).
template <class Call, class Name>
void detailed(const char* slot, Call&& call, Name&& name, double flops) {
  if (!enabled()) return call();
  const auto t0 = std::chrono::steady_clock::now();
  call();
  add_detail(name(), slot,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), flops);
}
}  // namespace kernel_profile

namespace half_args {
template <class A>
double tensor_bytes(const A& a) {
  if constexpr (std::is_same_v<std::remove_cvref_t<A>, Tensor>) {
    return a.defined() ? static_cast<double>(a.nbytes()) : 0.0;
  } else if constexpr (std::is_same_v<std::remove_cvref_t<A>, std::vector<Tensor>>) {
    double b = 0;
    for (const Tensor& t : a) b += t.defined() ? static_cast<double>(t.nbytes()) : 0.0;
    return b;
  } else {
    return 0.0;
  }
}
}  // namespace half_args

// Which 16-bit dtypes a device's kernel takes as they are.
enum class Accepts16 : uint8_t { kNone, kBFloat16, kBoth };

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
  // Marks `type`'s kernel as computing on 16-bit tensors itself (Note [16-bit kernels]).
  bool accept_16bit(DeviceType type, Accepts16 which) {
    accepts_[static_cast<int>(type)] = which;
    return true;
  }
  bool has(DeviceType type) const { return fns_[static_cast<int>(type)] != nullptr; }
  // Whether `type`'s kernel computes on bfloat16 tensors itself.
  bool takes_bf16(DeviceType type) const {
    return has(type) && accepts_[static_cast<int>(type)] != Accepts16::kNone;
  }
  const char* name() const { return name_; }

  // Runs the kernel registered for `device`'s kind.
  template <class... A>
  R operator()(Device device, A&&... args) const {
    // A slot that returns a value answers a question (the *_takes queries): not profiled.
    if (std::is_void_v<R> && kernel_profile::enabled()) {
      const kernel_profile::Call timed(name_, (0.0 + ... + half_args::tensor_bytes(args)));
      return call(device, std::forward<A>(args)...);
    }
    return call(device, std::forward<A>(args)...);
  }

 private:
  template <class... A>
  R call(Device device, A&&... args) const {
    Fn f = fns_[static_cast<int>(device.type)];
    GPIPE_CHECK(f != nullptr, "op '", name_, "' has no kernel for ", device_type_name(device.type),
                device.is_cuda() ? " (not implemented for CUDA, or gpipe built without CUDA)" : "");
    const Accepts16 accepts = accepts_[static_cast<int>(device.type)];
    const bool widen = accepts != Accepts16::kBoth &&
                       ((half_args::is_f16_arg(args) || ...) ||
                        (accepts == Accepts16::kNone && (half_args::is_bf16_arg(args) || ...)));
    if (!widen) return f(std::forward<A>(args)...);
    return call_widened(f, std::forward<A>(args)...);
  }

  template <class... A>
  static R call_widened(Fn f, A&&... args) {
    std::tuple<half_args::HalfArg<Args>...> held(std::forward<A>(args)...);
    auto finish = [&] { std::apply([](auto&... h) { (h.finish(), ...); }, held); };
    if constexpr (std::is_void_v<R>) {
      std::apply([&](auto&... h) { f(h.get()...); }, held);
      finish();
    } else {
      R r = std::apply([&](auto&... h) { return f(h.get()...); }, held);
      finish();
      return r;
    }
  }

  const char* name_;
  Fn fns_[kNumDeviceTypes] = {};
  Accepts16 accepts_[kNumDeviceTypes] = {};
};

}  // namespace gpipe::ops

// In a header: declares the slot `name` with signature `Sig`.
#define GPIPE_DECLARE_KERNEL(name, ...) \
  inline constinit ::gpipe::ops::KernelSlot<__VA_ARGS__> name { #name }

// In a device source file: registers `fn` in slot `slot` for that device kind.
#define GPIPE_REGISTER_KERNEL(slot, device_type, fn)                  \
  [[maybe_unused]] static const bool gpipe_registered_##slot##_##fn = \
      ::gpipe::ops::slot.set(device_type, fn)

// In a device source file: `slot`'s kernel for `device_type` computes on the
// 16-bit dtypes `which` (an Accepts16) itself (Note [16-bit kernels]).
#define GPIPE_KERNEL_ACCEPTS_16BIT(slot, device_type, which)            \
  [[maybe_unused]] static const bool gpipe_accepts16_##slot##_##which = \
      ::gpipe::ops::slot.accept_16bit(device_type, ::gpipe::ops::Accepts16::which)
