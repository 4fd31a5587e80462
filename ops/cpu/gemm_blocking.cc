// Note [GEMM blocking]. The driver (gemm_packed.cc) walks C in blocks of mc
// rows and nc columns of B, k in slices of kc; for each A panel (mr x kc) it
// runs every B panel (nr x kc) of the block, so the A panel is reused from
// L1 while the B block (kc x nc) streams from L2, and the A block (mc x kc)
// is re-read from L3 once per B block. The sizes follow from the caches:
//   kc = 2/3 of L1d over an A panel's row of kc elements (mr x elem bytes),
//        a multiple of 16, at most the kernel's kc_cap: the A panel takes
//        two thirds of L1 and the streaming B panel the rest;
//   nc = 3/4 of L2 over kc x elem bytes, a multiple of nr, in [4 nr, 4096];
//   mc = half this core's share of L3 over kc x elem bytes, a multiple of mr,
//        in [8 mr, 4096].
// On Zen 4 (32 KB L1d, 1 MB L2) the AVX-512 kernel (14 x 32, float32) gets
// kc 384, nc 512: the constants this kernel was tuned with there by hand.
// A CPU with a 48 KB L1d and 2 MB L2 (Zen 5, Sapphire Rapids) gets kc 512,
// nc 768. The blocking changes the order of the sums over k (slices of kc),
// so it is a pure function of the caches: one machine, one blocking, the
// same bits every run. gpipe_bench gemm prints it, and --sweep-blocking
// measures the model's choice against its neighbours.
//
// Note [Tile kernels' blocking]. AMX's 32 x 32 kernel (gemm_amx.cc) loads
// two A tiles and two B tiles (4 KB) per 32 of depth for four tdpbf16ps, 64
// cycles: a B panel streaming from L2 would need 32 bytes a cycle, about
// what L2 sustains (the float32 FMA kernel needs 9). So for kernels that
// say so (b_panel_in_l1) both panels share the two thirds of L1:
//   kc = 2/3 of L1d over (mr + nr) x elem bytes (kc 256 on a 48 KB L1d, where
//        the A-panel rule gave 512);
//   nc = a quarter of L2 over kc x elem bytes (1024 there): the rest holds
//        the C rows of the A panel in flight (32 rows of nc floats) and the
//        A panels on their way from L3.
// Measured on a 2-core Intel Xeon (Sapphire Rapids class, 48 KB L1d,
// 2 MB L2), one thread, `gpipe_bench gemm` with GPIPE_GEMM_BLOCKING in two
// alternating rounds: kc 256, nc 1024 against the old kc 512, nc 1536 ran
// the 2048 square at 1241 / 1227 against 805 / 807 GF/s, W2's weight
// gradients 7-27% faster (256 x 1024 x 1024: 1088 / 1079 against 832 /
// 870), products of depth 256 (one slice either way) level. At kc 256, nc
// 768, 1024 and 2048 were within the noise of each other; 3072 (3/4 of L2)
// ran the 8192-column output projection at 912 / 958 against 1117-1205.
// A product over the pool whose C holds at most 64K floats
// (Engine::kSmallCFloats, W2's 256 x 256 weight gradients) keeps the
// kernel's kc_cap (512) instead (not GPIPE_GEMM_BLOCKING's or
// set_gemm_blocking's kc, which hold for every product): at
// two threads each k-slice is a block the threads meet at, and its 256 x
// 256 x 1024 gradient in four slices ran 12-16% slower than in two (three
// runs); at one thread the two depths ran level. The depth follows from the
// shape and the call (over the pool or on its caller alone), never from the
// thread count, so neither do the bits. (A full tile with alpha 1 and beta
// 0 or 1 accumulates onto C inside the instruction whatever the slices; the
// depth moves the bits of short tiles, rows or columns, which add C after
// their sums, of transposed small products' tiles, and of every tile under
// another alpha or beta.) With both, W2's bf16 step (`gpipe_bench measure
// --precision bf16`, three alternating pairs) was level at one and two
// threads: most of its products have depth 256. Not measured on other AMX
// CPUs.
#include "ops/cpu/gemm_blocking.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "core/error.h"

namespace gpipe::ops::cpu {
namespace {

int64_t round_down(int64_t v, int64_t step) { return std::max<int64_t>(step, v / step * step); }

std::atomic<bool> has_override{false};  // the fast path of every product skips the lock
std::mutex& override_mutex() {
  static std::mutex m;
  return m;
}
std::optional<GemmBlocking>& override_value() {
  static std::optional<GemmBlocking> v;
  return v;
}

void check_blocking(const GemmBlocking& b, const std::string& what) {
  constexpr int kMax = 1 << 20;
  GPIPE_CHECK(b.kc >= 1 && b.kc <= kMax && b.nc >= 1 && b.nc <= kMax && b.mc >= 1 && b.mc <= kMax,
              what, ": GEMM blocking kc ", b.kc, ", nc ", b.nc, ", mc ", b.mc,
              " is out of range (each in [1, ", kMax, "])");
}

// GPIPE_GEMM_BLOCKING=kc,nc,mc, read once.
const std::optional<GemmBlocking>& env_blocking() {
  static const std::optional<GemmBlocking> env = []() -> std::optional<GemmBlocking> {
    const char* text = std::getenv("GPIPE_GEMM_BLOCKING");
    if (!text || !*text) return std::nullopt;
    GemmBlocking b;
    char tail = 0;
    GPIPE_CHECK(std::sscanf(text, "%d,%d,%d%c", &b.kc, &b.nc, &b.mc, &tail) == 3,
                "GPIPE_GEMM_BLOCKING='", text, "': expected three integers kc,nc,mc (e.g. ",
                "384,512,4096)");
    check_blocking(b, "GPIPE_GEMM_BLOCKING");
    return b;
  }();
  return env;
}

}  // namespace

GemmBlocking model_blocking(const CpuCaches& caches, int mr, int nr, int elem_bytes, int kc_cap,
                            bool b_in_l1) {
  GPIPE_CHECK(mr >= 1 && nr >= 1 && elem_bytes >= 1 && kc_cap >= 16,
              "GEMM blocking: bad kernel shape mr ", mr, ", nr ", nr, ", element bytes ",
              elem_bytes, ", kc cap ", kc_cap);
  const int64_t l1 = std::max<int64_t>(caches.l1d, 16 * 1024);
  const int64_t l2 = std::max<int64_t>(caches.l2, 256 * 1024);
  const int64_t l3 = std::max<int64_t>(caches.l3, l2);
  GemmBlocking b;
  // Both panels in L1, the B block in a quarter of L2 (Note [Tile kernels' blocking]).
  const int64_t l1_lanes = b_in_l1 ? mr + nr : mr;
  b.kc = static_cast<int>(
      std::min<int64_t>(kc_cap, round_down(l1 * 2 / 3 / (l1_lanes * elem_bytes), 16)));
  const int64_t panel_bytes = int64_t{b.kc} * elem_bytes;
  const int64_t b_block = b_in_l1 ? l2 / 4 : l2 * 3 / 4;
  b.nc = static_cast<int>(std::clamp<int64_t>(round_down(b_block / panel_bytes, nr), 4 * nr,
                                              std::max(4 * nr, 4096 / nr * nr)));
  b.mc = static_cast<int>(std::clamp<int64_t>(round_down(l3 / 2 / panel_bytes, mr), 8 * mr,
                                              std::max(8 * mr, 4096 / mr * mr)));
  return b;
}

GemmBlocking gemm_blocking(int mr, int nr, int elem_bytes, int kc_cap, std::string* source,
                           bool b_in_l1) {
  if (has_override.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(override_mutex());
    if (override_value()) {
      if (source) *source = "set";
      return *override_value();
    }
  }
  if (env_blocking()) {
    if (source) *source = "GPIPE_GEMM_BLOCKING";
    return *env_blocking();
  }
  if (source) *source = "model";
  return model_blocking(cpu_caches(), mr, nr, elem_bytes, kc_cap, b_in_l1);
}

void set_gemm_blocking(std::optional<GemmBlocking> blocking) {
  if (blocking) check_blocking(*blocking, "set_gemm_blocking");
  std::lock_guard<std::mutex> lock(override_mutex());
  override_value() = blocking;
  has_override.store(blocking.has_value(), std::memory_order_release);
}

std::string gemm_blocking_description(int mr, int nr, int elem_bytes, int kc_cap, bool b_in_l1) {
  std::string source;
  const GemmBlocking b = gemm_blocking(mr, nr, elem_bytes, kc_cap, &source, b_in_l1);
  std::ostringstream os;
  os << "kc " << b.kc << ", nc " << b.nc << ", mc " << b.mc << " (" << source;
  if (source == "model") os << ": " << cache_description(cpu_caches());
  os << ")";
  return os.str();
}

}  // namespace gpipe::ops::cpu
