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

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpipe {

// Ordered: a level implies every level below it.
enum class CpuIsa { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// The best level this CPU and OS support (cached after the first call).
CpuIsa detected_cpu_isa();
// Every level this CPU can run, baseline first (tests and benchmarks run
// each in turn).
std::vector<CpuIsa> supported_cpu_isas();
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

// Note [AMX tiles] (core/cpu_isa.cc). AMX-BF16's tile dot products
// (tdpbf16ps): usable when the CPU has AMX-TILE and AMX-BF16, the OS enables
// tile state in XCR0 and Linux grants this process tile data
// (arch_prctl(ARCH_REQ_XCOMP_PERM), asked once, at the first call). The
// bfloat16 GEMM uses them when cpu_amx(): the active level is avx512, they
// are usable and not switched off (GPIPE_CPU_AMX=off, or set_cpu_amx(false)).
// A refusal is no error: the GEMM takes AVX512_BF16 instead, and
// amx_status() says why.
struct AmxProbe {
  bool avx512 = false;                      // the avx512 level is detected
  bool amx_tile = false, amx_bf16 = false;  // cpuid leaf 7: edx bits 24 and 22
  uint64_t xcr0 = 0;                        // bits 17 (tile config) and 18 (tile data)
  int permission_errno = -1;                // the request's errno; 0 granted; -1 not asked
};
struct AmxDecision {
  bool usable = false;
  bool ask_permission = false;  // the CPU and OS are ready: the request decides
  std::string status;           // "usable", or why not
};
// The decision from a probe: a pure function, so every branch is tested on
// any CPU (tests/core/cpu_isa_test.cc).
AmxDecision decide_amx(const AmxProbe& probe);
bool detected_amx();
// "usable (Linux granted tile data)", "this CPU has no AMX-BF16", "Linux
// refused tile data (errno 28: ...)", ...
const std::string& amx_status();
bool cpu_amx();
// The switch alone: GPIPE_CPU_AMX / set_cpu_amx allow the tiles (usable or
// not). Reading it asks Linux for nothing.
bool cpu_amx_allowed();
// Switches the AMX path on or off for this process (tests, benchmarks).
// Switching it on where it is not usable throws gpipe::Error with
// amx_status(). GPIPE_CPU_AMX=on|off sets it at first use (on throws there
// the same way; anything else throws naming the text).
void set_cpu_amx(bool on);
class CpuAmxGuard {
 public:
  explicit CpuAmxGuard(bool on);
  ~CpuAmxGuard();
  CpuAmxGuard(const CpuAmxGuard&) = delete;
  CpuAmxGuard& operator=(const CpuAmxGuard&) = delete;

 private:
  bool prev_;
};

// "baseline", "avx2", "avx512".
const char* cpu_isa_name(CpuIsa isa);
// Inverse of cpu_isa_name; throws gpipe::Error naming the text otherwise.
CpuIsa parse_cpu_isa(std::string_view name);

// "AMD EPYC 9R14 96-Core Processor; supports avx512, avx2, baseline", for
// benchmark headers.
std::string cpu_description();

// Who made the CPU, from cpuid leaf 0's vendor string ("GenuineIntel",
// "AuthenticAMD"). For choices measured on one maker's cores and not the
// other's (Note [Prefetched A sources] in ops/cpu/gemm_pack.cc).
enum class CpuVendor { kIntel, kAmd, kOther };
CpuVendor cpu_vendor();

// The data caches one core sees, for the GEMM's blocking (ops/cpu/gemm_kernels.h).
// Read at first use from cpuid's deterministic cache parameters (leaf 4 on
// Intel, 0x8000001D on AMD), else from Linux's
// /sys/devices/system/cpu/cpu0/cache, else assumed (32 KB, 1 MB, 8 MB);
// `source` says which ("cpuid leaf 4", "cpuid leaf 0x8000001d", "sysfs",
// "assumed"). l3 is the share of one core: the cache's size over the logical
// processors cpuid says share it.
struct CpuCaches {
  int64_t l1d = 0, l2 = 0, l3 = 0;  // bytes
  std::string source;
};
const CpuCaches& cpu_caches();
// One cache level from a deterministic-cache-parameters subleaf (eax, ebx,
// ecx as cpuid returns them, the same layout on Intel and AMD): its level and
// size in bytes, 0 when the subleaf is not a data or unified cache; and the
// number of logical processors sharing it.
struct CacheLeaf {
  int level = 0;
  int64_t bytes = 0;
  int shared_by = 1;
};
CacheLeaf decode_cache_leaf(uint32_t eax, uint32_t ebx, uint32_t ecx);
// "L1d 32 KB, L2 1024 KB, L3 16384 KB per core (cpuid leaf 0x8000001d)".
std::string cache_description(const CpuCaches& caches);

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
