// AMX-BF16 tile instructions in plain C++, for gemm_amx_emulated.h. Each
// follows the instruction's definition (Intel SDM, vol. 2: LDTILECFG,
// TILELOADD, TILESTORED, TILEZERO, TDPBF16PS): a tile holds `rows` rows of
// `colsb` bytes from the configuration, loads and stores move exactly those
// bytes of each row `stride` bytes apart, and tdpbf16ps accumulates, for
// each row m of C and each of its float32 columns n, over the A row's dword
// pairs k: C[m][n] += A[m].bf16[2k] * B[k].bf16[2n], then the same for
// 2k + 1, rounding each sum to nearest even, bfloat16 subnormal inputs read
// as zero and subnormal results flushed to zero. Shapes the hardware
// rejects (#UD, #GP) throw std::logic_error here.
#include "ops/cpu/gemm_amx_emulated.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace gpipe::ops::cpu::packed {
namespace amx_emulated {
namespace {

struct TileConfig;

// This thread's emulated tile registers and their configuration.
struct Tiles {
  bool configured = false;
  int rows[8] = {};
  int colsb[8] = {};
  alignas(64) uint8_t data[8][16 * 64] = {};
};
thread_local Tiles tiles;
std::atomic<int64_t> tile_products{0};

void require(bool ok, const char* what) {
  if (!ok) throw std::logic_error(std::string("emulated AMX: ") + what);
}

void configure(const void* cfg) {
  uint8_t b[64];
  std::memcpy(b, cfg, 64);
  require(b[0] == 1, "palette must be 1");
  for (int i = 1; i < 16; ++i) require(b[i] == 0, "bytes 1-15 must be zero (start_row, reserved)");
  for (int i = 32; i < 48; ++i) require(b[i] == 0, "bytes 32-47 are reserved");
  for (int i = 56; i < 64; ++i) require(b[i] == 0, "bytes 56-63 are reserved");
  for (int t = 0; t < 8; ++t) {
    uint16_t colsb;
    std::memcpy(&colsb, b + 16 + 2 * t, 2);
    tiles.rows[t] = b[48 + t];
    tiles.colsb[t] = colsb;
    require(tiles.rows[t] <= 16 && tiles.colsb[t] <= 64, "a tile exceeds 16 rows of 64 bytes");
    require((tiles.rows[t] == 0) == (tiles.colsb[t] == 0), "a tile has rows or bytes but not both");
  }
  std::memset(tiles.data, 0, sizeof tiles.data);
  tiles.configured = true;
}

void check_tile(int t) {
  require(tiles.configured, "tile instruction before LDTILECFG");
  require(t >= 0 && t < 8 && tiles.rows[t] > 0, "tile not configured");
}

void zero(int t) {
  check_tile(t);
  std::memset(tiles.data[t], 0, sizeof tiles.data[t]);
}

void load(int t, const void* base, int64_t stride) {
  check_tile(t);
  std::memset(tiles.data[t], 0, sizeof tiles.data[t]);
  for (int r = 0; r < tiles.rows[t]; ++r)
    std::memcpy(tiles.data[t] + r * 64, static_cast<const uint8_t*>(base) + r * stride,
                static_cast<size_t>(tiles.colsb[t]));
}

void store(int t, void* base, int64_t stride) {
  check_tile(t);
  for (int r = 0; r < tiles.rows[t]; ++r)
    std::memcpy(static_cast<uint8_t*>(base) + r * stride, tiles.data[t] + r * 64,
                static_cast<size_t>(tiles.colsb[t]));
}

float bf16_in(const uint8_t* p) {  // denormals are zero
  uint16_t h;
  std::memcpy(&h, p, 2);
  uint32_t u = uint32_t{h} << 16;
  if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float flush(float x) {  // flush to zero
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
  std::memcpy(&x, &u, 4);
  return x;
}

void dp(int c, int a, int b) {
  check_tile(c);
  check_tile(a);
  check_tile(b);
  require(c != a && c != b && a != b, "tdpbf16ps needs three distinct tiles");
  tile_products.fetch_add(1, std::memory_order_relaxed);
  require(tiles.rows[a] == tiles.rows[c] && tiles.colsb[b] == tiles.colsb[c] &&
              tiles.colsb[a] == 4 * tiles.rows[b] && tiles.colsb[c] % 4 == 0,
          "tdpbf16ps tile shapes do not match");
  for (int m = 0; m < tiles.rows[c]; ++m) {
    float* out = reinterpret_cast<float*>(tiles.data[c] + m * 64);
    for (int k = 0; k < tiles.colsb[a] / 4; ++k)
      for (int n = 0; n < tiles.colsb[c] / 4; ++n) {
        const uint8_t* pa = tiles.data[a] + m * 64 + 4 * k;
        const uint8_t* pb = tiles.data[b] + k * 64 + 4 * n;
        float acc = flush(out[n] + bf16_in(pa) * bf16_in(pb));
        out[n] = flush(acc + bf16_in(pa + 2) * bf16_in(pb + 2));
      }
  }
}

#define AMX_ZERO(t) zero(t)
#define AMX_LOAD(t, p, s) load(t, p, s)
#define AMX_STORE(t, p, s) store(t, p, s)
#define AMX_DP(c, a, b) dp(c, a, b)

void amx_configure(const TileConfig& cfg);
void amx_release() { tiles.configured = false; }  // TILERELEASE: back to the init state

#include "ops/cpu/gemm_amx_tile.inc"

void amx_configure(const TileConfig& cfg) { configure(&cfg); }

}  // namespace
}  // namespace amx_emulated

int64_t amx_emulated_tile_products() { return amx_emulated::tile_products.load(); }

const Bf16DotKernelSet& amx_emulated_kernels() {
  static const Bf16DotKernelSet set = [] {
    Bf16DotKernelSet s = kAmxBf16Kernels;
    s.name = "amx-bf16-emulated";
    s.kernel = amx_emulated::kernel_32x32;
    s.begin = amx_emulated::tiles_begin;
    s.end = amx_emulated::tiles_end;
    return s;
  }();
  return set;
}

}  // namespace gpipe::ops::cpu::packed
