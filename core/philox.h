// Philox4x32-10 and its uniform mappings, shared by the CPU (core/rng.cc) and
// the CUDA kernels (ops/cuda/dropout.cu).
//
// Every function is `__host__ __device__` under nvcc and plain inline C++
// otherwise, so the two devices compile literally the same arithmetic and
// draw bit-identical numbers: dropout masks do not depend on the device.
// Element i of stream `key` is word (i % 4) of block i / 4 for float32
// uniforms, and the pair of words (2 * (i % 2), 2 * (i % 2) + 1) of block
// i / 2 for float64 uniforms. tests/cuda/philox_test checks the nvcc build
// of this header against core/rng.cc.
#pragma once

#include <cstdint>

#include "core/cxx_version.h"

#if defined(__CUDACC__)
#define GPIPE_HOST_DEVICE __host__ __device__
#else
#define GPIPE_HOST_DEVICE
#endif

namespace gpipe::philox {

struct Block {
  uint32_t w[4];
};

// Philox4x32-10 block function: 4 random words from a 128-bit counter and a
// 64-bit key (Salmon et al., SC'11; Random123's known-answer vectors hold).
GPIPE_HOST_DEVICE inline Block philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                             uint64_t key) {
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n1 = static_cast<uint32_t>(p1);
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    const uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Block{{c0, c1, c2, c3}};
}

// Block `index` of stream `key` (the counter is the 64-bit index).
GPIPE_HOST_DEVICE inline Block block_at(uint64_t key, uint64_t index) {
  return philox4x32_10(static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, 0u,
                       key);
}

// 24 random bits -> [0, 1) in float.
GPIPE_HOST_DEVICE inline float to_unit_float(uint32_t x) {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}

// 53 random bits -> [0, 1) in double.
GPIPE_HOST_DEVICE inline double to_unit_double(uint32_t a, uint32_t b) {
  const uint64_t bits = (static_cast<uint64_t>(a) << 21) ^ (b >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// Element `i` of the float32 uniform stream `key`.
GPIPE_HOST_DEVICE inline float uniform_float(uint64_t key, uint64_t i) {
  const Block b = block_at(key, i / 4);
  return to_unit_float(b.w[i % 4]);
}

// Element `i` of the float64 uniform stream `key`.
GPIPE_HOST_DEVICE inline double uniform_double(uint64_t key, uint64_t i) {
  const Block b = block_at(key, i / 2);
  return i % 2 == 0 ? to_unit_double(b.w[0], b.w[1]) : to_unit_double(b.w[2], b.w[3]);
}

}  // namespace gpipe::philox
