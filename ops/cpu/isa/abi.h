// The boundary between gpipe's generic code and the CPU kernels that are
// compiled once per ISA level (Note [CPU ISA kernels]).
//
// Note [CPU ISA kernels]: every CPU kernel file (ops/cpu/<family>.cc, listed
// in ops/BUILD as CPU_ISA_KERNEL_FILES) is compiled three times, for
// x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and x86-64-v2, each into its
// own namespace gpipe::ops::cpu::isa_<level> (GPIPE_ISA_NS) with Eigen
// renamed to gpipe_eigen_<level>. Each file exports, per kernel slot, one
// constant function pointer `<slot>_isa` taking TensorViews; ops/cpu/
// isa_dispatch.cc registers one trampoline per slot that converts the
// Tensors and calls the active level's pointer (cpu_isa(): detected, or
// forced with GPIPE_CPU_ISA). The rest of gpipe is built for x86-64-v2.
//
// The danger of compiling one program for several ISAs is the inline or
// template function from a shared header: instantiated in an AVX-512 file it
// becomes a weak symbol that the linker may pick for every caller, and an
// AVX2-only CPU then dies of SIGILL in ordinary code. So the ISA files see
// gpipe only through this header: plain structs, function declarations and
// compile-time templates. They use their own Tensor/Shape wrappers
// (ops/cpu/isa/prelude.h) and allocate, split work and fail through the
// isa_* services below. They run no static initialisers (the exported
// pointers are constinit): code in them would run at start-up on any CPU.
// tests/cpu_isa_symbols_test.sh proves it on the built objects: an ISA object defines no code
// symbol outside its own namespaces.
#pragma once

#include <cstdint>
#include <type_traits>

namespace gpipe {
class Tensor;
}  // namespace gpipe

namespace gpipe::ops {
template <class Sig>
class KernelSlot;
}  // namespace gpipe::ops

namespace gpipe::ops::cpu {

// A tensor as an ISA kernel sees it, valid for one kernel call. `base` is the
// start of the storage (nullptr for an undefined tensor); element (i0, i1,
// ...) is at base[offset + sum_d i_d * strides[d]], in elements of `dtype`.
// shape and strides point at the Tensor's own arrays (rank entries each).
struct TensorView {
  void* base;
  int64_t offset;
  int64_t numel;
  const int64_t* shape;
  const int64_t* strides;
  int32_t rank;
  int32_t device;  // index of the CPU device (cpu:i) holding it
  uint8_t dtype;   // gpipe::DType's value
  bool contiguous;
};

// A kernel slot's signature with every Tensor parameter replaced by a
// TensorView (outputs too: their storage is already allocated).
template <class A>
struct AbiArg {
  using type = A;
};
template <>
struct AbiArg<const ::gpipe::Tensor&> {
  using type = const TensorView&;
};
template <>
struct AbiArg<::gpipe::Tensor&> {
  using type = const TensorView&;
};
template <class Sig>
struct AbiOf;
template <class R, class... A>
struct AbiOf<R(A...)> {
  using type = R (*)(typename AbiArg<A>::type...);
};
template <class Slot>
struct SlotSig;
template <class Sig>
struct SlotSig<KernelSlot<Sig>> {
  using type = Sig;
};
// The exported pointer type for kernel slot `Slot` (e.g. ops::softmax_forward).
template <const auto& Slot>
using AbiFn = typename AbiOf<typename SlotSig<std::remove_cvref_t<decltype(Slot)>>::type>::type;

// Plain functions that are not kernel slots: the Eigen GEMM for small products.
template <class T>
using EigenGemmFn = void (*)(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                             int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// --- services the ISA files call (defined in ops/cpu/isa_dispatch.cc) ---
using ChunkFn = void (*)(void* ctx, int64_t lo, int64_t hi);
// gpipe::parallel_for over [begin, end) in chunks of at least `grain`.
void isa_parallel_for(int64_t begin, int64_t end, int64_t grain, ChunkFn fn, void* ctx);
int isa_intra_op_threads();
// Throws gpipe::Error(message).
[[noreturn]] void isa_fail(const char* message);
// Throws the error of gpipe's dispatch_floating (index = false) or
// dispatch_index (index = true) for a tensor of dtype `dtype` in `op`.
[[noreturn]] void isa_fail_dtype(const char* op, uint8_t dtype, bool index);
// Scratch memory from cpu:`device`'s allocator, counted as workspace;
// 64-byte aligned.
void* isa_alloc(int32_t device, int64_t bytes);
void isa_free(int32_t device, void* p, int64_t bytes);

}  // namespace gpipe::ops::cpu
