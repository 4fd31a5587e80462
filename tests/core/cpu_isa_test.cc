// CPU feature detection (core/cpu_isa.h): the ISA levels' names, guards and
// refusals, and the decision to use AMX tiles from what cpuid, XCR0 and
// Linux say (every branch, from made-up probes, on any CPU).
#include "core/cpu_isa.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

using namespace gpipe;
using Catch::Contains;

TEST_CASE("cpu_isa: names parse back, bad names and unsupported levels throw") {
  for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512})
    CHECK(parse_cpu_isa(cpu_isa_name(isa)) == isa);
  CHECK_THROWS_AS(parse_cpu_isa("avx1024"), Error);
  CHECK_THROWS_WITH(parse_cpu_isa("avx1024"), Contains("unknown CPU ISA level 'avx1024'") &&
                                                  Contains("avx512, avx2 or baseline"));
  CHECK_THROWS_AS(parse_cpu_isa(""), Error);
  CHECK(cpu_isa() <= detected_cpu_isa());
  CHECK_THAT(cpu_description(), Contains("supports") && Contains(cpu_isa_name(detected_cpu_isa())));
  const std::vector<CpuIsa> levels = supported_cpu_isas();  // baseline up to the detected level
  REQUIRE(levels.size() == static_cast<size_t>(detected_cpu_isa()) + 1);
  CHECK(levels.front() == CpuIsa::kBaseline);
  CHECK(levels.back() == detected_cpu_isa());
  for (CpuIsa isa : levels) {
    CpuIsaGuard guard(isa);
    CHECK(cpu_isa() == isa);
  }
  if (detected_cpu_isa() < CpuIsa::kAvx512) {
    const CpuIsa above = static_cast<CpuIsa>(static_cast<int>(detected_cpu_isa()) + 1);
    CHECK_THROWS_WITH(set_cpu_isa(above), Contains(std::string("'") + cpu_isa_name(above) + "'") &&
                                              Contains("this CPU supports only"));
  }
}

TEST_CASE("cpu_isa: AMX is used only with the CPU's tiles, the OS's state and Linux's permission") {
  AmxProbe ready;
  ready.avx512 = ready.amx_tile = ready.amx_bf16 = true;
  ready.xcr0 = 0xe7 | (uint64_t{3} << 17);  // x87, SSE, AVX, AVX-512, tile config and data
  ready.permission_errno = 0;
  const AmxDecision granted = decide_amx(ready);
  CHECK(granted.usable);
  CHECK_THAT(granted.status, Contains("usable"));

  AmxProbe p = ready;
  p.permission_errno = -1;  // the CPU and OS are ready: only then is Linux asked
  CHECK(decide_amx(p).ask_permission);
  CHECK(!decide_amx(p).usable);
  p.permission_errno = 28;  // ENOSPC: a sigaltstack too small for the tile state
  CHECK(!decide_amx(p).usable);
  CHECK(!decide_amx(p).ask_permission);
  CHECK_THAT(decide_amx(p).status, Contains("Linux refused tile data") && Contains("errno 28"));

  p = ready;
  p.amx_bf16 = false;  // AMX-TILE alone (AMX-INT8 parts) is not enough
  CHECK(!decide_amx(p).usable);
  CHECK(!decide_amx(p).ask_permission);
  CHECK_THAT(decide_amx(p).status, Contains("no AMX-BF16"));
  p = ready;
  p.amx_tile = false;
  CHECK_THAT(decide_amx(p).status, Contains("no AMX-BF16"));
  p = ready;
  p.avx512 = false;
  CHECK(!decide_amx(p).usable);
  CHECK_THAT(decide_amx(p).status, Contains("avx512"));
  for (int missing : {17, 18}) {  // tile config, tile data
    p = ready;
    p.xcr0 &= ~(uint64_t{1} << missing);
    CHECK(!decide_amx(p).usable);
    CHECK(!decide_amx(p).ask_permission);
    CHECK_THAT(decide_amx(p).status, Contains("XCR0"));
  }
  // This CPU: the answer and its reason agree, and a refusal is no error.
  CHECK(detected_amx() == (amx_status().rfind("usable", 0) == 0));
  if (!detected_amx()) CHECK(!cpu_amx());
}

TEST_CASE("cpu_isa: the maker from cpuid agrees with the brand string") {
  const std::string line = cpu_description();
  INFO(line);
  if (line.find("Intel") != std::string::npos) CHECK(cpu_vendor() == CpuVendor::kIntel);
  if (line.find("AMD") != std::string::npos) CHECK(cpu_vendor() == CpuVendor::kAmd);
}
