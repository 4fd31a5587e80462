// Pointer alignment, for the library calls that choose their kernels by it
// (cuDNN's vectorised engines, cuBLASLt's MIN_ALIGNMENT preferences).
#pragma once

#include <cstdint>
#include <initializer_list>

namespace gpipe::ops::cuda {

// The largest power of two up to `cap` (a power of two) that divides every address.
inline uint32_t pointer_alignment(std::initializer_list<const void*> ptrs, uint32_t cap) {
  uint32_t a = cap;
  for (const void* p : ptrs)
    while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

}  // namespace gpipe::ops::cuda
