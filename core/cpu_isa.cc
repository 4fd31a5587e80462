// CPU feature detection. cpuid says what the CPU implements; xgetbv (XCR0)
// says which register states the OS saves on a context switch. A level
// counts only when both hold: AVX needs XMM|YMM state (bits 1-2), AVX-512
// additionally opmask|ZMM_Hi256|Hi16_ZMM (bits 5-7).
#include "core/cpu_isa.h"

#include <cpuid.h>

#include <algorithm>
#include <atomic>
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
  return brand + "; supports " + supported_levels() +
         (detected_bf16_dot() ? " (+avx512_bf16)" : "");
}

bool detected_bf16_dot() {
  static const bool detected = detect_bf16_dot();
  return detected;
}

bool cpu_bf16_dot() { return cpu_isa() == CpuIsa::kAvx512 && detected_bf16_dot(); }

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
  const CpuidRegs vendor = cpuid(0);
  char name[13] = {};
  std::memcpy(name, &vendor.ebx, 4);
  std::memcpy(name + 4, &vendor.edx, 4);
  std::memcpy(name + 8, &vendor.ecx, 4);
  unsigned leaf = 0;
  if (std::strcmp(name, "GenuineIntel") == 0 && vendor.eax >= 4) {
    leaf = 4;
  } else if (std::strcmp(name, "AuthenticAMD") == 0 && cpuid(0x80000000).eax >= 0x8000001d &&
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
