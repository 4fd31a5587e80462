// The packed GEMM's panel packers (ops/cpu/gemm_kernels.h's PackFn) at every
// ISA level this CPU supports, against their definitions: every lane count
// up to two AVX-512 registers, depths around the 8- and 16-float steps, panel
// widths wider than the lanes, and rows further apart than they are long.
// Nothing outside the panel may be written, and pack_copy zeroes the lanes
// past the source's. Likewise the bfloat16 dot path's pair packers and the
// AMX path's panels where the CPU has AVX512_BF16.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "core/cpu_isa.h"
#include "core/error.h"
#include "ops/cpu/gemm_packed.h"

using namespace gpipe;

namespace {

constexpr float kGuard = -7.5f;  // in dst around and inside the panel before packing
constexpr int64_t kMargin = 40;  // guard floats before and after the panel

float source_value(int64_t row, int64_t col) { return static_cast<float>(row * 1000 + col + 1); }

// Packs a `lanes` x kc panel out of a source with rows ld apart (`copy`: the
// lanes run along a row, else across rows) and checks every float of dst.
void check_pack(bool copy, int64_t lanes, int64_t kc, int64_t stride, int64_t ld) {
  const int64_t rows = copy ? kc : lanes, cols = copy ? lanes : kc;
  // The source holds exactly the rows read; the last one only up to its last column.
  std::vector<float> src((rows - 1) * ld + cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) src[r * ld + c] = source_value(r, c);
  std::vector<float> dst(kc * stride + 2 * kMargin, kGuard);
  float* panel = dst.data() + kMargin;
  const auto& ks = ops::cpu::packed_kernels();
  (copy ? ks.pack_copy : ks.pack_transposed)(src.data(), ld, lanes, kc, panel, stride);
  INFO(cpu_isa_name(cpu_isa()) << (copy ? " pack_copy" : " pack_transposed") << " lanes=" << lanes
                               << " kc=" << kc << " stride=" << stride << " ld=" << ld);
  int64_t wrong = 0;
  for (int64_t i = 0; i < kMargin; ++i)
    wrong += (dst[i] != kGuard) + (dst[kMargin + kc * stride + i] != kGuard);
  for (int64_t p = 0; p < kc; ++p)
    for (int64_t r = 0; r < stride; ++r) {
      const float got = panel[p * stride + r];
      if (r < lanes)
        wrong += got != (copy ? source_value(p, r) : source_value(r, p));
      else if (copy)
        wrong += got != 0.0f;
      else  // left for the caller to zero: either as it was or zero
        wrong += got != kGuard && got != 0.0f;
    }
  CHECK(wrong == 0);
}

// The bfloat16 packers (gemm_kernels.h's PackPairsFn) of a dot kernel set:
// B panels (and AVX512_BF16's A panels) pair-interleaved, element (r, p) at
// dst[(p / 2) * 2 * stride + 2 r + p % 2]; AMX's A panels row-major, at
// dst[r * depth + p]; zero past the lanes and from kc to the packed depth
// (kc rounded up to k_align).
void check_pairs(const ops::cpu::packed::Bf16DotKernelSet& ks, bool a_panel, bool cols_along,
                 int64_t lanes, int64_t kc, int64_t stride, int64_t ld) {
  const int64_t rows = cols_along ? kc : lanes, cols = cols_along ? lanes : kc;
  const auto value = [](int64_t row, int64_t col) {
    return static_cast<uint16_t>((row * 131 + col * 7 + 1) & 0x7FFF);
  };
  std::vector<uint16_t> src((rows - 1) * ld + cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) src[r * ld + c] = value(r, c);
  const int64_t depth = (kc + ks.k_align - 1) / ks.k_align * ks.k_align;
  const bool row_major = a_panel && ks.pack_a_rows != ks.pack_rows;
  constexpr uint16_t kGuard16 = 0xABCD;
  std::vector<uint16_t> dst(depth * stride + 2 * kMargin, kGuard16);
  uint16_t* panel = dst.data() + kMargin;
  const auto pack = a_panel ? (cols_along ? ks.pack_a_cols : ks.pack_a_rows)
                            : (cols_along ? ks.pack_cols : ks.pack_rows);
  pack(src.data(), ld, lanes, kc, panel, stride);
  INFO(ks.name << (a_panel ? " A " : " B ") << (cols_along ? "cols" : "rows") << " lanes=" << lanes
               << " kc=" << kc << " stride=" << stride << " ld=" << ld);
  int64_t wrong = 0;
  for (int64_t i = 0; i < kMargin; ++i)
    wrong += (dst[i] != kGuard16) + (dst[kMargin + depth * stride + i] != kGuard16);
  for (int64_t p = 0; p < depth; ++p)
    for (int64_t r = 0; r < stride; ++r) {
      const uint16_t want =
          r < lanes && p < kc ? (cols_along ? value(p, r) : value(r, p)) : uint16_t{0};
      wrong += panel[row_major ? r * depth + p : (p / 2) * 2 * stride + 2 * r + p % 2] != want;
    }
  CHECK(wrong == 0);
}

void check_pair_packers(const ops::cpu::packed::Bf16DotKernelSet& ks,
                        const std::vector<int64_t>& depths) {
  for (int64_t lanes = 1; lanes <= 33; ++lanes)
    for (int64_t kc : depths)
      for (bool a_panel : {false, true})
        for (bool cols_along : {false, true})
          for (int64_t stride : {lanes, std::max<int64_t>(lanes, ks.mr),
                                 std::max<int64_t>(lanes, ks.nr), lanes + 19}) {
            const int64_t along = cols_along ? lanes : kc;
            for (int64_t ld : {along, along + 3, int64_t{1024}})
              check_pairs(ks, a_panel, cols_along, lanes, kc, stride, std::max(ld, along));
          }
}

}  // namespace

TEST_CASE("gemm packing: the bfloat16 pair packers match their definitions") {
  if (!detected_bf16_dot()) {  // the kernel set exists but must not run here
    WARN("no AVX512_BF16 on this CPU: the pair packers were not run");
    return;
  }
  check_pair_packers(ops::cpu::packed::kAvx512Bf16Kernels, {1, 2, 3, 15, 16, 17, 31, 33});
}

TEST_CASE("gemm packing: the AMX panels (row-major A, pair B, depth padded to 32) match theirs") {
  // The AMX set's packers use AVX-512 BW and VL and, for B, AVX512_BF16's.
  if (!detected_bf16_dot()) {
    WARN("no AVX512_BF16 on this CPU: the AMX packers were not run");
    return;
  }
  check_pair_packers(ops::cpu::packed::kAmxBf16Kernels, {1, 2, 15, 16, 17, 31, 32, 33, 63, 100});
}

TEST_CASE("gemm packing: both packers match their definitions at every level") {
  for (CpuIsa isa : supported_cpu_isas()) {
    CpuIsaGuard guard(isa);
    const auto& ks = ops::cpu::packed_kernels();
    for (int64_t lanes = 1; lanes <= 33; ++lanes)
      for (int64_t kc : {1, 2, 7, 8, 9, 15, 16, 17, 40})
        for (bool copy : {false, true})  // either packer builds A (mr) and B (nr) panels
          for (int64_t stride : {lanes, std::max<int64_t>(lanes, ks.mr),
                                 std::max<int64_t>(lanes, ks.nr), lanes + 19}) {
            const int64_t along = copy ? lanes : kc;
            for (int64_t ld : {along, along + 3, int64_t{1024}})
              check_pack(copy, lanes, kc, stride, std::max(ld, along));
          }
  }
}
