// Row helpers shared by the per-ISA kernels that sweep contiguous rows with
// Eigen expressions (softmax, cross-entropy, layer norm). Included after
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

}  // namespace gpipe::ops::cpu::GPIPE_ISA_NS
