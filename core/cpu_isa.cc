// CPU feature detection. cpuid says what the CPU implements; xgetbv (XCR0)
// says which register states the OS saves on a context switch. A level
// counts only when both hold: AVX needs XMM|YMM state (bits 1-2), AVX-512
// additionally opmask|ZMM_Hi256|Hi16_ZMM (bits 5-7).
#include "core/cpu_isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "core/error.h"

namespace gpipe {
namespace {

struct CpuidRegs {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

CpuidRegs cpuid(unsigned leaf, unsigned subleaf = 0) {
  CpuidRegs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) r = CpuidRegs{};
  return r;
}

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

bool bit(unsigned reg, int i) { return (reg >> i) & 1u; }

// The avx2 level is x86-64-v3 and avx512 is x86-64-v4, the -march their
// kernel files are compiled with (ops/BUILD): every feature of the level must
// be present, not just the vector width (GCC uses BMI2, LZCNT, MOVBE and
// F16C freely under -march=x86-64-v3).
CpuIsa detect() {
  const CpuidRegs l1 = cpuid(1);
  const bool osxsave = bit(l1.ecx, 27), avx = bit(l1.ecx, 28), fma = bit(l1.ecx, 12);
  const bool movbe = bit(l1.ecx, 22), f16c = bit(l1.ecx, 29);
  if (!osxsave || !avx || !fma || !movbe || !f16c) return CpuIsa::kBaseline;
  const uint64_t xcr0 = xgetbv0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6, os_zmm = (xcr0 & 0xe6) == 0xe6;
  if (cpuid(0).eax < 7 || cpuid(0x80000000).eax < 0x80000001) return CpuIsa::kBaseline;
  const CpuidRegs l7 = cpuid(7, 0);
  const bool lzcnt = bit(cpuid(0x80000001).ecx, 5);
  const bool v3 = bit(l7.ebx, 5) && bit(l7.ebx, 3) && bit(l7.ebx, 8) && lzcnt;  // AVX2 BMI1 BMI2
  const bool v4 = bit(l7.ebx, 16) && bit(l7.ebx, 17) && bit(l7.ebx, 28) && bit(l7.ebx, 30) &&
                  bit(l7.ebx, 31);  // AVX-512 F DQ CD BW VL
  if (v3 && v4 && os_zmm) return CpuIsa::kAvx512;
  if (v3 && os_ymm) return CpuIsa::kAvx2;
  return CpuIsa::kBaseline;
}

// AVX512_BF16 (cpuid leaf 7, subleaf 1, eax bit 5) on top of the avx512 level.
bool detect_bf16_dot() {
  if (detect() != CpuIsa::kAvx512 || cpuid(0).eax < 7 || cpuid(7, 0).eax < 1) return false;
  return bit(cpuid(7, 1).eax, 5);
}

std::string supported_levels() {
  std::string s;
  for (int i = static_cast<int>(detected_cpu_isa()); i >= 0; --i)
    s += std::string(s.empty() ? "" : ", ") + cpu_isa_name(static_cast<CpuIsa>(i));
  return s;
}

void check_supported(CpuIsa isa, std::string_view origin) {
  GPIPE_CHECK(isa <= detected_cpu_isa(), origin, " asks for CPU ISA level '", cpu_isa_name(isa),
              "', but this CPU supports only: ", supported_levels());
}

std::atomic<int> g_active{-1};  // -1: not chosen yet
std::once_flag g_env_once;

void choose_from_environment() {
  CpuIsa isa = detected_cpu_isa();
  if (const char* env = std::getenv("GPIPE_CPU_ISA"); env && *env) {
    try {
      isa = parse_cpu_isa(env);
    } catch (const Error& e) {
      throw Error(detail::concat("GPIPE_CPU_ISA: ", e.what()));
    }
    check_supported(isa, detail::concat("GPIPE_CPU_ISA=", env));
  }
  int expected = -1;
  g_active.compare_exchange_strong(expected, static_cast<int>(isa));
}

AmxProbe probe_amx() {
  AmxProbe p;
  p.avx512 = detected_cpu_isa() == CpuIsa::kAvx512;
  if (cpuid(0).eax >= 7) {
    const CpuidRegs l7 = cpuid(7, 0);
    p.amx_bf16 = bit(l7.edx, 22);
    p.amx_tile = bit(l7.edx, 24);
  }
  if (bit(cpuid(1).ecx, 27)) p.xcr0 = xgetbv0();  // OSXSAVE: xgetbv may run
  return p;
}

}  // namespace

CpuIsa detected_cpu_isa() {
  static const CpuIsa detected = detect();
  return detected;
}

std::vector<CpuIsa> supported_cpu_isas() {
  std::vector<CpuIsa> levels;
  for (int i = 0; i <= static_cast<int>(detected_cpu_isa()); ++i)
    levels.push_back(static_cast<CpuIsa>(i));
  return levels;
}

CpuIsa cpu_isa() {
  int active = g_active.load(std::memory_order_relaxed);
  if (active < 0) {
    std::call_once(g_env_once, choose_from_environment);  // rethrows (and retries) on error
    active = g_active.load();
  }
  return static_cast<CpuIsa>(active);
}

void set_cpu_isa(CpuIsa isa) {
  check_supported(isa, "set_cpu_isa");
  g_active = static_cast<int>(isa);
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kBaseline:
      return "baseline";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

CpuIsa parse_cpu_isa(std::string_view name) {
  for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512})
    if (name == cpu_isa_name(isa)) return isa;
  throw Error(
      detail::concat("unknown CPU ISA level '", name, "': expected avx512, avx2 or baseline"));
}

CpuVendor cpu_vendor() {
  const CpuidRegs r = cpuid(0);
  char name[13] = {};
  std::memcpy(name, &r.ebx, 4);
  std::memcpy(name + 4, &r.edx, 4);
  std::memcpy(name + 8, &r.ecx, 4);
  if (std::strcmp(name, "GenuineIntel") == 0) return CpuVendor::kIntel;
  if (std::strcmp(name, "AuthenticAMD") == 0) return CpuVendor::kAmd;
  return CpuVendor::kOther;
}

std::string cpu_description() {
  std::string brand;
  if (cpuid(0x80000000).eax >= 0x80000004) {
    char text[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const CpuidRegs r = cpuid(0x80000002 + i);
      std::memcpy(text + 16 * i, &r, 16);
    }
    brand = text;
    const auto first = brand.find_first_not_of(' '), last = brand.find_last_not_of(' ');
    brand = first == std::string::npos ? "" : brand.substr(first, last - first + 1);
  }
  if (brand.empty()) brand = "unknown x86-64 CPU";
  const AmxProbe amx = probe_amx();  // what the CPU has: describing it asks Linux for nothing
  return brand + "; supports " + supported_levels() +
         (detected_bf16_dot() ? " (+avx512_bf16)" : "") +
         (amx.amx_tile && amx.amx_bf16 ? " (+amx-bf16)" : "");
}

bool detected_bf16_dot() {
  static const bool detected = detect_bf16_dot();
  return detected;
}

bool cpu_bf16_dot() { return cpu_isa() == CpuIsa::kAvx512 && detected_bf16_dot(); }

// Note [AMX tiles]. AMX keeps eight tile registers of up to 16 rows of 64
// bytes (8 KB of state), too large for Linux to save for every process, so
// the kernel sets XCR0's tile bits (17: config, 18: data) but traps a
// process's first tile instruction unless it asked for the state with
// arch_prctl(ARCH_REQ_XCOMP_PERM, 18) (Linux 5.16 on; the permission is
// per process, for all its threads). gpipe asks once, the first time the
// bfloat16 GEMM chooses its path at the avx512 level with the switch not
// off (GPIPE_CPU_AMX=off never asks: a grant enlarges every signal frame).
// A sigaltstack too small for the larger signal frame (ENOSPC) or a seccomp
// policy refuse it; then the GEMM keeps AVX512_BF16, and amx_status()
// (printed by gpipe_bench gemm) says why. The kernel itself is
// ops/cpu/gemm_amx.cc.
AmxDecision decide_amx(const AmxProbe& p) {
  AmxDecision d;
  constexpr uint64_t kTileState = (uint64_t{1} << 17) | (uint64_t{1} << 18);
  if (!p.amx_tile || !p.amx_bf16) {
    d.status = "this CPU has no AMX-BF16";
  } else if (!p.avx512) {
    d.status = "the CPU has AMX-BF16 but not the avx512 level its packing needs";
  } else if ((p.xcr0 & kTileState) != kTileState) {
    d.status = "the OS does not enable AMX tile state (XCR0 bits 17 and 18)";
  } else if (p.permission_errno < 0) {
    d.ask_permission = true;
    d.status = "tile data permission not asked yet";
  } else if (p.permission_errno > 0) {
    d.status = detail::concat("Linux refused tile data (arch_prctl ARCH_REQ_XCOMP_PERM: errno ",
                              p.permission_errno, ", ", std::strerror(p.permission_errno), ")");
  } else {
    d.usable = true;
    d.status = "usable (Linux granted tile data)";
  }
  return d;
}

namespace {

// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): 0, or the errno.
int request_tile_data() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) return 0;
  return errno > 0 ? errno : EPERM;
#else
  return ENOSYS;
#endif
}

const AmxDecision& amx_decision() {
  static const AmxDecision decision = [] {
    AmxProbe p = probe_amx();
    if (decide_amx(p).ask_permission) p.permission_errno = request_tile_data();
    return decide_amx(p);
  }();
  return decision;
}

std::atomic<int> g_amx{-1};  // -1: not chosen yet; 0 off; 1 on
std::once_flag g_amx_once;

void check_amx_usable(std::string_view origin) {
  GPIPE_CHECK(detected_amx(), origin,
              " asks for AMX tiles, but they are not usable here: ", amx_status());
}

// The switch alone (1: use the tiles if usable); reading it never asks
// Linux for tile data, so GPIPE_CPU_AMX=off (or a lower level) keeps the
// process's signal frames as they were.
void choose_amx_from_environment() {
  bool on = true;
  if (const char* env = std::getenv("GPIPE_CPU_AMX"); env && *env) {
    const std::string_view v(env);
    if (v == "on" || v == "1") {
      check_amx_usable(detail::concat("GPIPE_CPU_AMX=", v));
    } else if (v == "off" || v == "0") {
      on = false;
    } else {
      throw Error(detail::concat("GPIPE_CPU_AMX='", v, "': expected on or off (1 or 0)"));
    }
  }
  int expected = -1;
  g_amx.compare_exchange_strong(expected, on ? 1 : 0);
}

}  // namespace

bool detected_amx() { return amx_decision().usable; }
bool cpu_amx_allowed() {
  int v = g_amx.load(std::memory_order_relaxed);
  if (v < 0) {
    std::call_once(g_amx_once, choose_amx_from_environment);
    v = g_amx.load();
  }
  return v == 1;
}
const std::string& amx_status() { return amx_decision().status; }
bool cpu_amx() { return cpu_isa() == CpuIsa::kAvx512 && cpu_amx_allowed() && detected_amx(); }

void set_cpu_amx(bool on) {
  if (on) check_amx_usable("set_cpu_amx");
  g_amx = on ? 1 : 0;
}

CpuAmxGuard::CpuAmxGuard(bool on) : prev_(cpu_amx_allowed()) { set_cpu_amx(on); }
CpuAmxGuard::~CpuAmxGuard() { g_amx = prev_ ? 1 : 0; }

CpuIsaGuard::CpuIsaGuard(CpuIsa isa) : prev_(cpu_isa()) { set_cpu_isa(isa); }
CpuIsaGuard::~CpuIsaGuard() { g_active = static_cast<int>(prev_); }

CacheLeaf decode_cache_leaf(uint32_t eax, uint32_t ebx, uint32_t ecx) {
  CacheLeaf leaf;
  const uint32_t type = eax & 0x1f;  // 1 data, 2 instruction, 3 unified; 0: no more caches
  leaf.level = static_cast<int>((eax >> 5) & 0x7);
  leaf.shared_by = static_cast<int>((eax >> 14) & 0xfff) + 1;
  if (type != 1 && type != 3) return leaf;
  const int64_t ways = ((ebx >> 22) & 0x3ff) + 1, partitions = ((ebx >> 12) & 0x3ff) + 1;
  const int64_t line = (ebx & 0xfff) + 1, sets = int64_t{ecx} + 1;
  leaf.bytes = ways * partitions * line * sets;
  return leaf;
}

namespace {

void take_level(CpuCaches& c, int level, int64_t bytes) {
  if (bytes <= 0) return;
  if (level == 1) c.l1d = bytes;
  if (level == 2) c.l2 = bytes;
  if (level == 3) c.l3 = bytes;
}

// Leaf 4 (Intel) or 0x8000001D (AMD with topology extensions): one subleaf
// per cache until type 0.
bool caches_from_cpuid(CpuCaches& c) {
  const CpuVendor vendor = cpu_vendor();
  unsigned leaf = 0;
  if (vendor == CpuVendor::kIntel && cpuid(0).eax >= 4) {
    leaf = 4;
  } else if (vendor == CpuVendor::kAmd && cpuid(0x80000000).eax >= 0x8000001d &&
             bit(cpuid(0x80000001).ecx, 22)) {
    leaf = 0x8000001d;
  } else {
    return false;
  }
  for (unsigned sub = 0; sub < 16; ++sub) {
    const CpuidRegs r = cpuid(leaf, sub);
    if ((r.eax & 0x1f) == 0) break;
    const CacheLeaf l = decode_cache_leaf(r.eax, r.ebx, r.ecx);
    take_level(c, l.level, l.level == 3 ? l.bytes / l.shared_by : l.bytes);
  }
  c.source = leaf == 4 ? "cpuid leaf 4" : "cpuid leaf 0x8000001d";
  return c.l1d > 0 && c.l2 > 0;
}

// "48K", "2048K", "32M" as Linux writes cache sizes.
int64_t parse_size(const std::string& text) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || v <= 0) return 0;
  if (*end == 'K') return v * 1024;
  if (*end == 'M') return v * 1024 * 1024;
  return v;
}

int count_cpus(const std::string& list) {  // "0-1,4" -> 3
  int n = 0;
  std::stringstream in(list);
  std::string part;
  while (std::getline(in, part, ',')) {
    int lo = 0, hi = 0;
    if (std::sscanf(part.c_str(), "%d-%d", &lo, &hi) == 2)
      n += hi >= lo ? hi - lo + 1 : 0;
    else if (!part.empty())
      ++n;
  }
  return std::max(n, 1);
}

bool caches_from_sysfs(CpuCaches& c) {
  const std::string base = "/sys/devices/system/cpu/cpu0/cache/index";
  for (int i = 0; i < 8; ++i) {
    auto read = [&](const char* name) {
      std::ifstream in(base + std::to_string(i) + "/" + name);
      std::string v;
      std::getline(in, v);
      return v;
    };
    const std::string type = read("type");
    if (type.empty()) break;
    if (type != "Data" && type != "Unified") continue;
    const int level = std::atoi(read("level").c_str());
    const int64_t bytes = parse_size(read("size"));
    take_level(c, level, level == 3 ? bytes / count_cpus(read("shared_cpu_list")) : bytes);
  }
  c.source = "sysfs";
  return c.l1d > 0 && c.l2 > 0;
}

}  // namespace

const CpuCaches& cpu_caches() {
  static const CpuCaches caches = [] {
    CpuCaches c;
    if (caches_from_cpuid(c)) return c;
    c = CpuCaches{};
    if (caches_from_sysfs(c)) return c;
    return CpuCaches{32 * 1024, 1024 * 1024, 8 * 1024 * 1024, "assumed"};
  }();
  return caches;
}

std::string cache_description(const CpuCaches& c) {
  std::ostringstream os;
  os << "L1d " << c.l1d / 1024 << " KB, L2 " << c.l2 / 1024 << " KB, L3 " << c.l3 / 1024
     << " KB per core (" << c.source << ")";
  return os.str();
}

}  // namespace gpipe
