// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
//
// A stream is named by a 64-bit key; element i of the stream is a pure
// function of (key, i). Nothing is hidden mutable state, so a recomputed
// forward draws exactly the numbers the first forward drew. See
// Note [Remat RNG] in pipeline/stage.cc: dropout in layer l of micro-batch
// m at step s uses the key (seed, s, m, l), whatever K or the schedule is.
#pragma once

#include <array>
#include <cstdint>

#include "core/cxx_version.h"

namespace gpipe {

// Philox4x32-10 block function: 4 random words from a 128-bit counter and 64-bit key.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, uint64_t key);

// Mixes values into one well-distributed 64-bit key (splitmix64 chain).
uint64_t mix_key(uint64_t a, uint64_t b);

// The work an RNG draw belongs to. Thread-local; the pipeline sets it per task.
struct RngContext {
  uint64_t seed = 0;
  uint64_t step = 0;
  uint64_t micro_batch = 0;
  uint64_t layer = 0;
  // Key of the stream for sub-stream `salt` (e.g. the index of a dropout within a layer).
  uint64_t key(uint64_t salt = 0) const;
  bool operator==(const RngContext&) const = default;
};

const RngContext& current_rng_context();

// Sets this thread's RngContext while alive.
class RngScope {
 public:
  explicit RngScope(const RngContext& ctx);
  ~RngScope();
  RngScope(const RngScope&) = delete;
  RngScope& operator=(const RngScope&) = delete;

 private:
  RngContext prev_;
};

// Fill out[0..n) with element (offset + i) of stream `key`.
void philox_uniform(uint64_t key, uint64_t offset, float* out, int64_t n);   // [0, 1)
void philox_uniform(uint64_t key, uint64_t offset, double* out, int64_t n);  // [0, 1)
// Dropout with probability p keeps element i when its float uniform u_i is
// at least this: the smallest float u with u >= p in double (every dropout
// kernel and the GEMM epilogue's dropout compare against it, so they keep
// the same elements).
float dropout_keep_threshold(double p);
void philox_normal(uint64_t key, uint64_t offset, float* out, int64_t n);  // N(0, 1)
void philox_normal(uint64_t key, uint64_t offset, double* out, int64_t n);

}  // namespace gpipe
