// The packed GEMM's blocks split over the intra-op pool (gemm_driver.h).
//
// Note [Shared B panels]. By default the pool's threads split the A
// panels (rows of C) and share one packed B block: whichever thread first
// reaches a B panel claims it with an atomic flag and packs it; the others
// pack the remaining panels meanwhile and wait only for panels in flight. So
// one parallel_for per block suffices, and a pool that runs the chunks one
// after another on the caller (it is busy, or we are inside a pool task) still
// works: nobody waits for a panel nobody packs. When op(A) has too few panels
// to share out evenly (m small) the threads split the B panels instead, and A
// is packed once up front (or not at all, Note [Direct A] in gemm_kernels.h).
//
// Note [Claimed A units]. Equal shares of the rows do not finish together:
// timing W2's blocks (0.3-3 ms) on a two-core Zen 4 put the two threads' ends
// 38 us apart on average, one core idle for 4.5% of the GEMMs' time,
// whichever thread happened to meet slower memory or packed more of B. Where
// a block has enough A units (one panel, or one group for a transposed A: at
// least kUnitsPerThread per thread), each thread owns an equal range of them
// and claims its own from the front; a thread whose range is done takes the
// others' from their back ends, so the threads end within about one unit
// (two under the first chunk, where one is claimed ahead).
// (Claiming from one shared counter instead, alternating units between the
// threads, ran slower in 7 of 8 paired W2 steps: each core's source rows were
// no longer one stream for its prefetcher.) Under the first B chunk units
// are claimed one ahead, so the next one's source is prefetched while the
// current one is packed and run. With several B chunks (n over nc) each
// chunk has its own ranges, and a unit packed under the first chunk by one
// thread may run under a later one on the other: its flag says when it is
// packed. Which thread computes a tile does not change its sums, so the
// results are the bits of the static split. Measured in `perf` samples of
// W2's two-thread step (20 steps, two runs each): the micro-kernel's share
// of all cycles rose from 74.6-74.8% to 76.1-77.2%, the pool's waits fell
// from 2.8-3.0% to 2.6-2.7%.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/gemm_driver.h"
#include "ops/cpu/gemm_packed.h"

namespace gpipe::ops::cpu::gemm_driver {
namespace {

// Waits for another thread to finish packing a B panel (microseconds); yields
// after a while in case that thread lost its core.
void wait_ready(const std::atomic<uint8_t>& state) {
  for (int spins = 0; state.load(std::memory_order_acquire) != 2; ++spins) {
    if (spins < 4096)
      __builtin_ia32_pause();
    else
      std::this_thread::yield();
  }
}

// The dot kernel set's begin and end around one thread's part of a block
// (AMX's tile configuration, gemm_kernels.h).
class KernelScope {
 public:
  explicit KernelScope(const Engine& e) : e_(e) {
    if (e_.dot != nullptr && e_.dot->begin != nullptr) e_.dot->begin();
  }
  ~KernelScope() {
    if (e_.dot != nullptr && e_.dot->end != nullptr) e_.dot->end();
  }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  const Engine& e_;
};

// Claims and packs the B panels of chunk [jc, jend) that are still free, then
// waits for those in flight (Note [Shared B panels]).
void share_b_chunk(const Problem& P, const Engine& ks, const Block& blk,
                   std::atomic<uint8_t>* b_state, int64_t jc, int64_t jend) {
  for (int64_t jp = jc; jp < jend; ++jp) {
    uint8_t expected = 0;
    if (b_state[jp].load(std::memory_order_relaxed) == 0 &&
        b_state[jp].compare_exchange_strong(expected, 1, std::memory_order_acquire)) {
      pack_b_panel(P, ks, blk.j0 + jp * ks.nr, blk.p0, blk.kc, blk.b_panel(ks, jp));
      b_state[jp].store(2, std::memory_order_release);
    }
  }
  for (int64_t jp = jc; jp < jend; ++jp) wait_ready(b_state[jp]);
}

// Rows of C split: A panels [lo, hi) on this task, B panels shared.
void run_block_split_rows(const Problem& P, const Engine& ks, const Block& blk,
                          std::atomic<uint8_t>* b_state, int64_t lo, int64_t hi) {
  const KernelScope scope(ks);
  const int64_t nc_panels = std::max<int64_t>(1, ks.nc / ks.nr);
  const int64_t group = a_panel_group(P, ks);  // Note [Grouped transposed A] in gemm_pack.cc
  for (int64_t jc = 0; jc < blk.b_panels; jc += nc_panels) {
    const int64_t jend = std::min(blk.b_panels, jc + nc_panels);
    share_b_chunk(P, ks, blk, b_state, jc, jend);
    for (int64_t ip = lo; ip < hi; ++ip) {
      if (jc == 0 && (ip - lo) % group == 0)
        pack_a_panels(P, ks, blk, ip, std::min(group, hi - ip));
      const int64_t next = lo + ((ip - lo) / group + 1) * group;
      const int64_t parts = group * (jend - jc);
      for (int64_t jp = jc; jp < jend; ++jp) {
        if (jc == 0 && next < hi)  // Note [Prefetched A sources] in gemm_pack.cc
          prefetch_a_panels(P, ks, blk, next, std::min(group, hi - next),
                            ((ip - lo) % group) * (jend - jc) + (jp - jc), parts);
        run_tile(P, ks, blk, ip, jp);
      }
    }
  }
}

constexpr int64_t kUnitsPerThread = 6;  // Note [Claimed A units]: fewer, and the split is static

// A thread's range of A units under one B chunk: the next from the front
// (low 32 bits) and the end (high 32 bits), claimed from the front by its
// owner and from the back by the others once their own ranges are done
// (Note [Claimed A units]).
using UnitRange = std::atomic<uint64_t>;
uint64_t pack_range(int64_t front, int64_t back) {
  return static_cast<uint64_t>(front) | (static_cast<uint64_t>(back) << 32);
}
int64_t claim_unit(UnitRange& r, bool front) {
  uint64_t v = r.load(std::memory_order_relaxed);
  while (true) {
    const int64_t f = static_cast<int64_t>(v & 0xffffffffu), b = static_cast<int64_t>(v >> 32);
    if (f >= b) return -1;
    const uint64_t next = front ? pack_range(f + 1, b) : pack_range(f, b - 1);
    if (r.compare_exchange_weak(v, next, std::memory_order_relaxed)) return front ? f : b - 1;
  }
}

// Rows of C claimed a unit of A panels at a time (Note [Claimed A units]):
// thread t's own range first, front to back, then the others' from their ends.
void run_block_claimed(const Problem& P, const Engine& ks, const Block& blk,
                       std::atomic<uint8_t>* b_state, std::atomic<uint8_t>* a_state,
                       UnitRange* ranges, int64_t group, int t, int threads) {
  const KernelScope scope(ks);
  const int64_t nc_panels = std::max<int64_t>(1, ks.nc / ks.nr);
  const int64_t units = ceil_div(blk.a_panels, group);
  for (int64_t jc = 0, chunk = 0; jc < blk.b_panels; jc += nc_panels, ++chunk) {
    const int64_t jend = std::min(blk.b_panels, jc + nc_panels);
    share_b_chunk(P, ks, blk, b_state, jc, jend);
    UnitRange* own = ranges + chunk * threads;
    const auto claim = [&]() -> int64_t {
      int64_t u = claim_unit(own[t], true);
      for (int o = 1; u < 0 && o < threads; ++o) u = claim_unit(own[(t + o) % threads], false);
      return u < 0 ? units : u;
    };
    // One ahead under the first chunk only, where the next unit's source is prefetched.
    int64_t u = claim(), ahead = jc == 0 ? claim() : units;
    while (u < units) {
      const int64_t ip0 = u * group, count = std::min(group, blk.a_panels - ip0);
      if (P.direct_a) {
        // Note [Direct A] in gemm_kernels.h: nothing packed, nothing to wait for.
      } else if (jc == 0) {
        pack_a_panels(P, ks, blk, ip0, count);
        a_state[u].store(2, std::memory_order_release);
      } else {
        wait_ready(a_state[u]);
      }
      const int64_t parts = count * (jend - jc);
      for (int64_t ip = ip0; ip < ip0 + count; ++ip)
        for (int64_t jp = jc; jp < jend; ++jp) {
          if (jc == 0 && ahead < units)  // Note [Prefetched A sources] in gemm_pack.cc
            prefetch_a_panels(P, ks, blk, ahead * group,
                              std::min(group, blk.a_panels - ahead * group),
                              (ip - ip0) * (jend - jc) + (jp - jc), parts);
          run_tile(P, ks, blk, ip, jp);
        }
      if (jc == 0) {
        u = ahead;
        ahead = claim();
      } else {
        u = claim();
      }
    }
  }
}

// Columns of C split: B panels [lo, hi) on this task, A packed beforehand (or
// read in place, Note [Direct A] in gemm_kernels.h).
void run_block_split_cols(const Problem& P, const Engine& ks, const Block& blk, int64_t lo,
                          int64_t hi) {
  const KernelScope scope(ks);
  const int64_t nc_panels = std::max<int64_t>(1, ks.nc / ks.nr);
  for (int64_t jc = lo; jc < hi; jc += nc_panels) {
    const int64_t jend = std::min(hi, jc + nc_panels);
    for (int64_t jp = jc; jp < jend; ++jp)
      pack_b_panel(P, ks, blk.j0 + jp * ks.nr, blk.p0, blk.kc, blk.b_panel(ks, jp));
    for (int64_t ip = 0; ip < blk.a_panels; ++ip)
      for (int64_t jp = jc; jp < jend; ++jp) run_tile(P, ks, blk, ip, jp);
  }
}

// Fraction of `threads` busy when `panels` are dealt out in equal chunks.
double balance(int64_t panels, int threads) {
  return static_cast<double>(panels) / (threads * ceil_div(panels, threads));
}

// Note [Row shares]. When the threads split the rows of C, thread t takes
// the A panels [row_share(t), row_share(t + 1)): the panel boundary nearest
// to t / threads of the block's rows. Equal panel counts would load the
// thread with the short last panel less: 256 rows (18 panels of 14 and one of
// 4) dealt 10 + 9 give 140 and 116 rows, 91% busy; the nearest boundaries
// give 126 and 130, 98%.
int64_t row_share(const Block& blk, int mr, int threads, int t) {
  if (t >= threads) return blk.a_panels;
  const double row = static_cast<double>(t) * static_cast<double>(blk.rows) / threads;
  return std::clamp<int64_t>(std::llround(row / mr), 0, blk.a_panels);
}

// Fraction of `threads` busy with the rows of C dealt out as row_share does.
double row_balance(const Block& blk, int mr, int threads) {
  int64_t most = 0;
  for (int t = 0; t < threads; ++t) {
    const int64_t end_row = std::min(blk.rows, row_share(blk, mr, threads, t + 1) * mr);
    most = std::max(most, end_row - row_share(blk, mr, threads, t) * mr);
  }
  return static_cast<double>(blk.rows) / (static_cast<double>(threads) * most);
}

}  // namespace

void run_block(const Problem& P, const Engine& ks, const Block& blk, Workspace& ws, int threads) {
  if (threads > 1 &&
      row_balance(blk, ks.mr, threads) < std::min(0.9, balance(blk.b_panels, threads))) {
    for (int64_t ip = 0; ip < blk.a_panels; ip += a_panel_group(P, ks))
      pack_a_panels(P, ks, blk, ip, std::min(a_panel_group(P, ks), blk.a_panels - ip));
    parallel_for(0, blk.b_panels, 1,
                 [&](int64_t lo, int64_t hi) { run_block_split_cols(P, ks, blk, lo, hi); });
    return;
  }
  std::atomic<uint8_t>* b_state = ws.states(blk.b_panels);
  const int64_t group = a_panel_group(P, ks), units = ceil_div(blk.a_panels, group);
  if (threads > 1 && units >= kUnitsPerThread * threads) {
    GPIPE_ASSERT(units < (int64_t{1} << 32), "packed GEMM: ", units, " A units overflow a range");
    std::atomic<uint8_t>* a_state = ws.a_state.get(units);
    const int64_t chunks = ceil_div(blk.b_panels, std::max<int64_t>(1, ks.nc / ks.nr));
    UnitRange* ranges = ws.unit_ranges.get(chunks * threads);
    for (int64_t c = 0; c < chunks; ++c)
      for (int t = 0; t < threads; ++t)
        ranges[c * threads + t].store(pack_range(units * t / threads, units * (t + 1) / threads),
                                      std::memory_order_relaxed);
    parallel_for(0, threads, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t)
        run_block_claimed(P, ks, blk, b_state, a_state, ranges, group, static_cast<int>(t),
                          threads);
    });
    return;
  }
  if (threads <= 1) {
    run_block_split_rows(P, ks, blk, b_state, 0, blk.a_panels);
    return;
  }
  parallel_for(0, threads, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t)
      run_block_split_rows(P, ks, blk, b_state, row_share(blk, ks.mr, threads, static_cast<int>(t)),
                           row_share(blk, ks.mr, threads, static_cast<int>(t) + 1));
  });
}

// Note [Two k-slices on two threads]. A weight gradient of a narrow layer
// (W2's 256 x 256 x 1024 G^T X) is two k-slices of a C too small to split
// well by rows: each thread's share of a slice is a 0.15 ms block, and the
// two meet twice a product, at each slice's B panels and at its end. With
// exactly two slices and two threads the slices run side by side instead,
// each thread packing its own panels into its own buffers: the first
// thread's slice into C (with the product's beta), the second's into a
// scratch T from zero; then C += T, split by rows. The sums are the
// sequential ones: there the second slice stores alpha * acc + 1 * C, one
// rounding of acc + C when alpha is 1, and here T holds acc exactly and
// C + T rounds the same sum once; an epilogue (bias, ReLU, residual,
// dropout) then runs as its pass over those rows, which has the bits of the
// one in registers (Note [Epilogue in registers] in gemm_kernels.h). So it
// needs alpha 1, a float32 C (no bfloat16 result), and the float32 kernels:
// AMX adds the products to C's own tile, inside the instruction. C at most
// kSplitKMaxFloats: W2's two-thread profile on the Intel Xeon put its
// 256 x 256 x 1024 weight gradients at 51% of the peak split by rows and
// 62% split by k, while products with four times that C (1024 x 256 x
// 1024), whose rows already split evenly, lost 2-6 points to the extra pass
// over C and T. W2's step at two threads there: 2-5% faster in 4 of 4
// alternating pairs.
constexpr int64_t kSplitKMaxFloats = int64_t{1} << 16;  // 256 KB of C
std::atomic<int64_t> g_split_k_products{0};

Workspace& thread_workspace() {
  static thread_local Workspace ws;
  return ws;
}

bool split_k_fits(const Problem& P, const Engine& ks, int threads, int64_t k_slices,
                  bool one_block) {
  return threads == 2 && k_slices == 2 && one_block && ks.ks != nullptr && ks.dot == nullptr &&
         P.alpha == 1.0f && P.c != nullptr && P.m * P.n <= kSplitKMaxFloats;
}

void run_split_k(const Problem& P, const Engine& ks, int64_t kc_max) {
  static thread_local AlignedFloats scratch;
  float* t = scratch.get(P.m * P.n);
  parallel_for(0, 2, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t half = lo; half < hi; ++half) {
      Problem Q = P;
      Q.ep = nullptr;  // after the sum of the two slices, below
      if (half == 1) {
        Q.c = t;
        Q.ldc = P.ct ? P.m : P.n;
      }
      Workspace& ws = thread_workspace();
      const int64_t p0 = half * kc_max;
      const Block blk =
          make_block(ks, 0, P.m, 0, P.n, p0, std::min(kc_max, P.k - p0), half == 0 ? P.beta : 0.0f,
                     packed_room(ws.a, ks, ceil_div(P.m, ks.mr) * ks.mr * kc_max),
                     packed_room(ws.b, ks, ceil_div(P.n, ks.nr) * ks.nr * kc_max));
      run_block(Q, ks, blk, ws, 1);
    }
  });
  // C's stored rows: the product's columns where C is stored transposed
  // (Note [Transposed small products] in gemm_packed.cc; no epilogue then).
  const int64_t rows = P.ct ? P.n : P.m, cols = P.ct ? P.m : P.n;
  parallel_for(0, rows, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float* ci = P.c + i * P.ldc;
      const float* ti = t + i * cols;
      for (int64_t j = 0; j < cols; ++j) ci[j] = ci[j] + ti[j];
    }
    if (P.ep != nullptr) P.epilogue(*P.ep, P.c + lo * P.ldc, P.ldc, lo, 0, hi - lo, P.n);
  });
  g_split_k_products.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace gpipe::ops::cpu::gemm_driver

namespace gpipe::ops::cpu {
int64_t split_k_products() { return gemm_driver::g_split_k_products.load(); }
}  // namespace gpipe::ops::cpu
