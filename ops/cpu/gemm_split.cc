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
// is packed once up front.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "core/parallel.h"
#include "ops/cpu/gemm_driver.h"

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

// Rows of C split: A panels [lo, hi) on this task, B panels shared.
void run_block_split_rows(const Problem& P, const Engine& ks, const Block& blk,
                          std::atomic<uint8_t>* b_state, int64_t lo, int64_t hi) {
  const KernelScope scope(ks);
  const int64_t nc_panels = std::max<int64_t>(1, ks.nc / ks.nr);
  const int64_t group = a_panel_group(P, ks);  // Note [Grouped transposed A] in gemm_packed.cc
  for (int64_t jc = 0; jc < blk.b_panels; jc += nc_panels) {
    const int64_t jend = std::min(blk.b_panels, jc + nc_panels);
    for (int64_t jp = jc; jp < jend; ++jp) {
      uint8_t expected = 0;
      if (b_state[jp].load(std::memory_order_relaxed) == 0 &&
          b_state[jp].compare_exchange_strong(expected, 1, std::memory_order_acquire)) {
        pack_b_panel(P, ks, blk.j0 + jp * ks.nr, blk.p0, blk.kc, blk.b_panel(ks, jp));
        b_state[jp].store(2, std::memory_order_release);
      }
    }
    for (int64_t jp = jc; jp < jend; ++jp) wait_ready(b_state[jp]);
    for (int64_t ip = lo; ip < hi; ++ip) {
      if (jc == 0 && (ip - lo) % group == 0)
        pack_a_panels(P, ks, blk, ip, std::min(group, hi - ip));
      const int64_t next = lo + ((ip - lo) / group + 1) * group;
      const int64_t parts = group * (jend - jc);
      for (int64_t jp = jc; jp < jend; ++jp) {
        if (jc == 0 && next < hi)  // Note [Prefetched A sources] in gemm_packed.cc
          prefetch_a_panels(P, ks, blk, next, std::min(group, hi - next),
                            ((ip - lo) % group) * (jend - jc) + (jp - jc), parts);
        run_tile(P, ks, blk, ip, jp);
      }
    }
  }
}

// Columns of C split: B panels [lo, hi) on this task, A packed beforehand.
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

}  // namespace gpipe::ops::cpu::gemm_driver
