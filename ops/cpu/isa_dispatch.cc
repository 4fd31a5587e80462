// Registers the CPU kernel of every slot as a trampoline to the kernel of the
// active ISA level, and serves the ISA files' needs (Note [CPU ISA kernels]
// in ops/cpu/isa/abi.h). This file is ordinary code, built for x86-64-v2.
#include <string>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/cpu_isa.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "ops/attention_kernels.h"
#include "ops/batch_norm_kernels.h"
#include "ops/conv_kernels.h"
#include "ops/cpu/isa/abi.h"
#include "ops/dropout_kernels.h"
#include "ops/elementwise_kernels.h"
#include "ops/embedding_kernels.h"
#include "ops/layer_norm_kernels.h"
#include "ops/linalg_kernels.h"
#include "ops/loss_kernels.h"
#include "ops/mask_kernels.h"
#include "ops/optimizer_kernels.h"
#include "ops/pool_kernels.h"
#include "ops/reduce_kernels.h"
#include "ops/rms_norm_kernels.h"
#include "ops/softmax_kernels.h"

namespace gpipe::ops::cpu {

// The ISA files mirror DType's values in their own enum.
static_assert(static_cast<int>(DType::kFloat32) == 0 && static_cast<int>(DType::kFloat64) == 1 &&
              static_cast<int>(DType::kInt32) == 2 && static_cast<int>(DType::kInt64) == 3 &&
              static_cast<int>(DType::kBFloat16) == 4 && static_cast<int>(DType::kFloat16) == 5);

void isa_parallel_for(int64_t begin, int64_t end, int64_t grain, ChunkFn fn, void* ctx) {
  parallel_for(begin, end, grain, [&](int64_t lo, int64_t hi) { fn(ctx, lo, hi); });
}

int isa_intra_op_threads() { return intra_op_threads(); }

void isa_fail(const char* message) { throw Error(message); }

void isa_fail_dtype(const char* op, uint8_t dtype, bool index) {
  throw_unsupported_dtype(op, static_cast<DType>(dtype), index ? kIndexDTypes : kFloatingDTypes);
}

void* isa_alloc(int32_t device, int64_t bytes) {
  return allocator_for(Device(DeviceType::kCPU, device))
      .allocate(static_cast<size_t>(bytes), MemoryCategory::kWorkspace);
}

void isa_free(int32_t device, void* p, int64_t bytes) {
  allocator_for(Device(DeviceType::kCPU, device))
      .deallocate(p, static_cast<size_t>(bytes), MemoryCategory::kWorkspace);
}

namespace {

TensorView view_of(const Tensor& t) {
  TensorView v{};
  if (!t.defined()) return v;
  // A defined tensor needs a non-null base (nullptr means undefined to the
  // kernels), even an empty one; nothing is read through that one.
  alignas(64) static char empty_storage[64];
  v.base = t.storage()->data();
  if (v.base == nullptr) v.base = empty_storage;
  v.offset = t.offset();
  v.numel = t.numel();
  v.rank = static_cast<int32_t>(t.rank());
  v.device = t.device().index;
  v.dtype = static_cast<uint8_t>(t.dtype());
  v.contiguous = t.is_contiguous();
  v.shape = t.shape().dims().data();  // the tensor outlives the kernel call
  v.strides = t.strides().data();
  return v;
}

template <class A>
decltype(auto) to_abi(A&& a) {
  if constexpr (std::is_same_v<std::remove_cvref_t<A>, Tensor>)
    return view_of(a);
  else
    return std::forward<A>(a);
}

// The active level's pointer among one slot's three exports.
template <class Fn>
Fn pick(Fn baseline, Fn avx2, Fn avx512) {
  switch (cpu_isa()) {
    case CpuIsa::kAvx512:
      return avx512;
    case CpuIsa::kAvx2:
      return avx2;
    case CpuIsa::kBaseline:
      break;
  }
  return baseline;
}

template <class Sig>
struct Trampoline;
template <class R, class... A>
struct Trampoline<R(A...)> {
  // Tables::pick() is the active pointer; Check::run(args...) validates first.
  template <class Tables, class Check>
  static R run(A... args) {
    Check::run(args...);
    return Tables::pick()(to_abi(std::forward<A>(args))...);
  }
};

struct NoCheck {
  template <class... A>
  static void run(const A&...) {}
};

// Every index in [0, v): before any kernel writes anything.
void check_indices(const Tensor& indices, int64_t v) {
  dispatch_index(indices.dtype(), "embedding", [&](auto zi) {
    using I = decltype(zi);
    const I* idx = indices.data<I>();
    for (int64_t k = 0; k < indices.numel(); ++k) {
      const int64_t i = static_cast<int64_t>(idx[k]);
      GPIPE_CHECK(i >= 0 && i < v, "embedding: index ", i, " at position ",
                  indices.shape().position_str(k), " of indices ", indices.shape(),
                  " is out of range for a table of V = ", v, " rows (valid: 0 .. ", v - 1, ")");
    }
  });
}

struct EmbeddingForwardCheck {
  static void run(const Tensor& weight, const Tensor& indices, const Tensor&) {
    check_indices(indices, weight.size(0));
  }
};
struct EmbeddingBackwardCheck {
  static void run(const Tensor&, const Tensor& indices, bool, const Tensor& gweight) {
    check_indices(indices, gweight.size(0));
  }
};

// Every target in [0, c) or the ignore index.
void check_targets(int64_t c, const Tensor& targets, int64_t ignore_index) {
  dispatch_index(targets.dtype(), "cross_entropy", [&](auto zi) {
    using I = decltype(zi);
    const I* t = targets.data<I>();
    for (int64_t i = 0; i < targets.numel(); ++i) {
      const int64_t v = static_cast<int64_t>(t[i]);
      if (v == ignore_index) continue;
      GPIPE_CHECK(v >= 0 && v < c, "cross_entropy: target ", v, " at position ", i,
                  " is out of range for C = ", c, " classes (valid: 0 .. ", c - 1,
                  ", or ignore_index = ", ignore_index, ")");
    }
  });
}

struct CrossEntropyForwardCheck {
  static void run(const Tensor& logits, const Tensor& targets, int64_t ignore_index, double,
                  const Tensor&, const Tensor&) {
    check_targets(logits.size(-1), targets, ignore_index);
  }
};
struct LinearCrossEntropyCheck {
  static void run(const Tensor&, const Tensor& w, const Tensor& targets, int64_t ignore_index,
                  double, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
    check_targets(w.size(0), targets, ignore_index);
  }
};
struct CrossEntropyBackwardCheck {
  static void run(const Tensor& logits, const Tensor& targets, const Tensor&, const Tensor&,
                  int64_t ignore_index, double, const Tensor&) {
    check_targets(logits.size(-1), targets, ignore_index);
  }
};

// Fused kernels that a device may leave out: their front functions run a
// composed form of other ops there (ops::attention_composed, ...).
[[maybe_unused]] const bool g_optional = [] {
  note_optional_kernel("attention_forward");
  note_optional_kernel("attention_backward");
  note_optional_kernel("bias_act_forward");
  note_optional_kernel("bias_act_backward");
  note_optional_kernel("rms_norm_forward");  // ops::rms_norm_composed elsewhere
  note_optional_kernel("rms_norm_backward");
  note_optional_kernel("linear_bias_act");  // Note [Fused linear]: matmul + bias_activation
  note_optional_kernel(
      "linear_cross_entropy_fused");  // Note [Fused output loss]: linear + cross_entropy
  // core's CPU gradient sum (register_cpu_accumulate_into, below); other
  // devices sum through their register_accumulate kernel.
  note_optional_kernel("accumulate_into");
  return true;
}();

}  // namespace

// Declares slot's three exports and registers its trampoline.
#define GPIPE_CPU_ISA_SLOT_CHECKED(slot, check)                                                    \
  namespace isa_avx512 {                                                                           \
  extern const AbiFn<::gpipe::ops::slot> slot##_isa;                                               \
  }                                                                                                \
  namespace isa_avx2 {                                                                             \
  extern const AbiFn<::gpipe::ops::slot> slot##_isa;                                               \
  }                                                                                                \
  namespace isa_baseline {                                                                         \
  extern const AbiFn<::gpipe::ops::slot> slot##_isa;                                               \
  }                                                                                                \
  namespace {                                                                                      \
  struct slot##_tables {                                                                           \
    static AbiFn<::gpipe::ops::slot> pick() {                                                      \
      return cpu::pick(isa_baseline::slot##_isa, isa_avx2::slot##_isa, isa_avx512::slot##_isa);    \
    }                                                                                              \
  };                                                                                               \
  [[maybe_unused]] const bool slot##_registered = ::gpipe::ops::slot.set(                          \
      DeviceType::kCPU,                                                                            \
      &Trampoline<SlotSig<std::remove_cvref_t<decltype(::gpipe::ops::slot)>>::type>::template run< \
          slot##_tables, check>);                                                                  \
  }
#define GPIPE_CPU_ISA_SLOT(slot) GPIPE_CPU_ISA_SLOT_CHECKED(slot, NoCheck)

GPIPE_CPU_ISA_SLOT(attention_forward)
GPIPE_CPU_ISA_SLOT(attention_backward)
GPIPE_CPU_ISA_SLOT(batch_norm_stats)
GPIPE_CPU_ISA_SLOT(cast_into)
GPIPE_CPU_ISA_SLOT(accumulate_into)
GPIPE_CPU_ISA_SLOT(batch_norm_forward)
GPIPE_CPU_ISA_SLOT(batch_norm_backward)
GPIPE_CPU_ISA_SLOT(batch_norm_update_running_stats)
GPIPE_CPU_ISA_SLOT(conv2d_forward)
GPIPE_CPU_ISA_SLOT(conv2d_backward_input)
GPIPE_CPU_ISA_SLOT(conv2d_backward_weight)
GPIPE_CPU_ISA_SLOT(conv2d_backward_bias)
GPIPE_CPU_ISA_SLOT(dropout_apply)
GPIPE_CPU_ISA_SLOT(binary_elementwise)
GPIPE_CPU_ISA_SLOT(unary_elementwise)
GPIPE_CPU_ISA_SLOT(unary_backward)
GPIPE_CPU_ISA_SLOT(bias_act_forward)
GPIPE_CPU_ISA_SLOT(bias_act_backward)
GPIPE_CPU_ISA_SLOT_CHECKED(embedding_forward, EmbeddingForwardCheck)
GPIPE_CPU_ISA_SLOT_CHECKED(embedding_backward, EmbeddingBackwardCheck)
GPIPE_CPU_ISA_SLOT(layer_norm_forward)
GPIPE_CPU_ISA_SLOT(layer_norm_backward)
GPIPE_CPU_ISA_SLOT(rms_norm_forward)
GPIPE_CPU_ISA_SLOT(rms_norm_backward)
GPIPE_CPU_ISA_SLOT(batched_gemm)
GPIPE_CPU_ISA_SLOT(batched_gemm_bf16_out)
GPIPE_CPU_ISA_SLOT(linear_bias_act)
GPIPE_CPU_ISA_SLOT_CHECKED(cross_entropy_forward, CrossEntropyForwardCheck)
GPIPE_CPU_ISA_SLOT_CHECKED(cross_entropy_backward, CrossEntropyBackwardCheck)
GPIPE_CPU_ISA_SLOT_CHECKED(linear_cross_entropy_fused, LinearCrossEntropyCheck)
GPIPE_CPU_ISA_SLOT(masked_fill_apply)
GPIPE_CPU_ISA_SLOT(adam_update)
GPIPE_CPU_ISA_SLOT(sgd_update)
GPIPE_CPU_ISA_SLOT(rmsprop_update)
GPIPE_CPU_ISA_SLOT(sum_squares_into)
GPIPE_CPU_ISA_SLOT(max_pool2d_forward)
GPIPE_CPU_ISA_SLOT(max_pool2d_backward)
GPIPE_CPU_ISA_SLOT(avg_pool2d_forward)
GPIPE_CPU_ISA_SLOT(avg_pool2d_backward)
GPIPE_CPU_ISA_SLOT(reduce_sum)
GPIPE_CPU_ISA_SLOT(reduce_max)
GPIPE_CPU_ISA_SLOT(reduce_max_backward)
GPIPE_CPU_ISA_SLOT(softmax_forward)
GPIPE_CPU_ISA_SLOT(log_softmax_forward)
GPIPE_CPU_ISA_SLOT(softmax_backward)
GPIPE_CPU_ISA_SLOT(log_softmax_backward)

// Gradient sums at the CPU's vector width (core/autograd.h), registered after
// the slot above in this file's order of initialisation.
namespace {
[[maybe_unused]] const bool g_accumulate_hook = [] {
  register_cpu_accumulate_into(
      [](Tensor& dst, const Tensor& src) { accumulate_into(dst.device(), dst, src); });
  return true;
}();
}  // namespace

// Kernels that compute on 16-bit tensors themselves (Note [16-bit kernels]
// in ops/dispatch.h); the others get float32 copies.
GPIPE_KERNEL_ACCEPTS_16BIT(cast_into, DeviceType::kCPU, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(accumulate_into, DeviceType::kCPU, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(batched_gemm, DeviceType::kCPU, kBFloat16);
GPIPE_KERNEL_ACCEPTS_16BIT(batched_gemm_bf16_out, DeviceType::kCPU, kBFloat16);
GPIPE_KERNEL_ACCEPTS_16BIT(linear_bias_act, DeviceType::kCPU, kBFloat16);
GPIPE_KERNEL_ACCEPTS_16BIT(attention_forward, DeviceType::kCPU, kBFloat16);
GPIPE_KERNEL_ACCEPTS_16BIT(attention_backward, DeviceType::kCPU, kBFloat16);
GPIPE_KERNEL_ACCEPTS_16BIT(conv2d_forward, DeviceType::kCPU, kBFloat16);
GPIPE_KERNEL_ACCEPTS_16BIT(conv2d_backward_input, DeviceType::kCPU, kBFloat16);
GPIPE_KERNEL_ACCEPTS_16BIT(conv2d_backward_weight, DeviceType::kCPU, kBFloat16);
GPIPE_KERNEL_ACCEPTS_16BIT(cross_entropy_forward, DeviceType::kCPU, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(cross_entropy_backward, DeviceType::kCPU, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(linear_cross_entropy_fused, DeviceType::kCPU, kBFloat16);
GPIPE_KERNEL_ACCEPTS_16BIT(bias_act_forward, DeviceType::kCPU, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(bias_act_backward, DeviceType::kCPU, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(layer_norm_forward, DeviceType::kCPU, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(layer_norm_backward, DeviceType::kCPU, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(rms_norm_forward, DeviceType::kCPU, kBoth);
GPIPE_KERNEL_ACCEPTS_16BIT(rms_norm_backward, DeviceType::kCPU, kBoth);

}  // namespace gpipe::ops::cpu
