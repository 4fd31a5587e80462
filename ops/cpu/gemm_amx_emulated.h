// The AMX-BF16 kernel set with its tile instructions emulated in C++ (tests
// only): the tile program of gemm_amx_tile.inc and the real set's packers,
// so the driver's AMX path runs, and is checked, on a CPU without AMX. Its
// packers need AVX-512 (BW, VL): run it only where the avx512 level is
// detected.
#pragma once

#include <cstdint>

#include "ops/cpu/gemm_kernels.h"

namespace gpipe::ops::cpu::packed {

const Bf16DotKernelSet& amx_emulated_kernels();
// How many emulated tdpbf16ps have run in this process (a test's evidence
// that a product took the AMX path).
int64_t amx_emulated_tile_products();

}  // namespace gpipe::ops::cpu::packed
