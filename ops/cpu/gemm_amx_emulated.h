// The AMX-BF16 kernel set with its tile instructions emulated in C++ (tests
// only): the tile program of gemm_amx_tile.inc and the real set's packers,
// so the driver's AMX path runs, and is checked, on a CPU without AMX. Its
// packers need AVX-512 (BW, VL): run it only where the avx512 level is
// detected.
#pragma once

#include "ops/cpu/gemm_kernels.h"

namespace gpipe::ops::cpu::packed {

const Bf16DotKernelSet& amx_emulated_kernels();

}  // namespace gpipe::ops::cpu::packed
