// The cache blocking of the packed GEMM (gemm_packed.cc), chosen from the
// caches of the CPU at hand: Note [GEMM blocking] in gemm_blocking.cc.
#pragma once

#include <optional>
#include <string>

#include "core/cpu_isa.h"

namespace gpipe::ops::cpu {

// kc: the depth of a packed panel (an mr x kc A panel stays in L1 while B
// panels stream past it); nc: the columns of the packed B block (kc x nc
// stays in L2); mc: the rows of the packed A block (mc x kc in this core's
// share of L3).
struct GemmBlocking {
  int kc = 0, nc = 0, mc = 0;
  bool operator==(const GemmBlocking&) const = default;
};

// The model's blocking for a micro-kernel of tile mr x nr over packed
// elements of `elem_bytes` bytes (4: float32; 2: bfloat16 pairs), whose
// panels it was tuned no deeper than kc_cap; `b_in_l1`: the kernel keeps its
// B panel in L1 beside the A panel (Note [Tile kernels' blocking]).
GemmBlocking model_blocking(const CpuCaches& caches, int mr, int nr, int elem_bytes, int kc_cap,
                            bool b_in_l1 = false);

// What the packed GEMM uses for that kernel now: set_gemm_blocking's
// override, else GPIPE_GEMM_BLOCKING=kc,nc,mc from the environment (read at
// first use; malformed text throws gpipe::Error naming it), else the model
// on cpu_caches(). `source` (may be null) gets "set", "GPIPE_GEMM_BLOCKING"
// or "model".
GemmBlocking gemm_blocking(int mr, int nr, int elem_bytes, int kc_cap,
                           std::string* source = nullptr, bool b_in_l1 = false);

// One blocking for every kernel (tests, benchmark sweeps); nullopt returns to
// the environment's or the model's. Throws gpipe::Error for sizes outside
// [1, 1 << 20].
void set_gemm_blocking(std::optional<GemmBlocking> blocking);

// "kc 384, nc 512, mc 4096 (model: L1d 32 KB, L2 1024 KB, ...)", for logs.
std::string gemm_blocking_description(int mr, int nr, int elem_bytes, int kc_cap,
                                      bool b_in_l1 = false);

}  // namespace gpipe::ops::cpu
