// CPU instruction-set levels that gpipe's CPU kernels are built for, detected
// at run time (cpuid + xgetbv), so one binary picks the fastest kernels the
// CPU at hand and its OS support.
//
//   kBaseline  x86-64-v2 (SSE4.2, POPCNT): what the default build requires.
//   kAvx2      x86-64-v3: AVX2, FMA, BMI1/2, LZCNT, MOVBE, F16C, with the OS
//              saving ymm state.
//   kAvx512    x86-64-v4: that plus AVX-512 F, BW, CD, DQ and VL, with the OS
//              saving zmm state.
//
// The active level is the detected one unless GPIPE_CPU_ISA=avx512|avx2|baseline
// is set in the environment (read once, at first use) or set_cpu_isa is
// called; asking for a level the CPU lacks, or for an unknown name, throws
// gpipe::Error naming the request and what the CPU supports.
#pragma once

#include <string>
#include <string_view>

namespace gpipe {

// Ordered: a level implies every level below it.
enum class CpuIsa { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// The best level this CPU and OS support (cached after the first call).
CpuIsa detected_cpu_isa();
// The level kernels should use now. Throws gpipe::Error at first use if
// GPIPE_CPU_ISA names an unknown or unsupported level.
CpuIsa cpu_isa();
// Makes `isa` the active level (tests, benchmarks). Throws gpipe::Error if the
// CPU does not support it.
void set_cpu_isa(CpuIsa isa);

// AVX512_BF16's bfloat16 dot products (vdpbf16ps): whether the CPU has
// them, and whether the bfloat16 GEMM uses them now (the active level is
// avx512 and the CPU has them; a forced lower level converts to float32
// instead).
bool detected_bf16_dot();
bool cpu_bf16_dot();

// "baseline", "avx2", "avx512".
const char* cpu_isa_name(CpuIsa isa);
// Inverse of cpu_isa_name; throws gpipe::Error naming the text otherwise.
CpuIsa parse_cpu_isa(std::string_view name);

// "AMD EPYC 9R14 96-Core Processor; supports avx512, avx2, baseline", for
// benchmark headers.
std::string cpu_description();

// Sets the active level for its lifetime and restores the previous one.
class CpuIsaGuard {
 public:
  explicit CpuIsaGuard(CpuIsa isa);
  ~CpuIsaGuard();
  CpuIsaGuard(const CpuIsaGuard&) = delete;
  CpuIsaGuard& operator=(const CpuIsaGuard&) = delete;

 private:
  CpuIsa prev_;
};

}  // namespace gpipe
