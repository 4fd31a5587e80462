// Row helpers shared by the per-ISA kernels that sweep contiguous rows with
// Eigen expressions (softmax, cross-entropy, layer and RMS norm). Included after
// ops/cpu/isa/prelude.h, inside nothing: it opens the level's namespace itself.
#pragma once

#include "ops/cpu/isa/prelude.h"

namespace gpipe::ops::cpu::GPIPE_ISA_NS {

// n contiguous elements as an Eigen array: its expressions are vectorised at
// this level's width.
template <class T>
using Vec = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using ConstVec = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// Where exp underflows. Eigen's vectorised exp clamps its argument, so
// exp(-inf) comes out as ~1e-39 (float): harmless inside a sum, but a masked
// (-inf) logit's probability or gradient must be exactly 0, so the kernels
// that need that zero the entries whose argument is below this cutoff.
template <class T>
constexpr T kExpCutoff = sizeof(T) == 4 ? T(-87) : T(-708);

// Calls f(T{}, P{}): T the element type of x (and of the outputs and
// gradients that share it); P that of the parameter p, x's own or float32
// beside a 16-bit x (the front functions check that). The normalisations'
// statistics and parameter gradients are compute_t<T> (Note [16-bit
// kernels] in ops/dispatch.h): a 16-bit row is widened into a float32
// buffer, computed as the float32 kernel computes it, and its outputs are
// rounded once.
template <class F>
void dispatch_floating_with_params(const Tensor& x, const Tensor& p, const char* op, F&& f) {
  dispatch_floating_16(x.dtype(), op, [&](auto z) {
    using T = decltype(z);
    if constexpr (is_16bit_v<T>) {
      if (p.defined() && p.dtype() == DType::kFloat32) return f(z, float{});
    }
    f(z, z);
  });
}

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
