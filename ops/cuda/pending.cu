// Note [Pending CUDA kernels] in ops/cuda/pending.h.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "ops/cuda/pending.h"

namespace gpipe::ops::cuda {
namespace {

// -1: not read yet; 0 off; 1 on.
std::atomic<int>& state() {
  static std::atomic<int> s{-1};
  return s;
}

}  // namespace

bool pending_kernels() {
  int s = state().load(std::memory_order_relaxed);
  if (s < 0) {
    const char* v = std::getenv("GPIPE_CUDA_PENDING");
    GPIPE_CHECK(v == nullptr || std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0,
                "GPIPE_CUDA_PENDING='", v,
                "': expected 1 (also run the CUDA kernels that have not yet passed on a GPU) or 0");
    s = v != nullptr && v[0] == '1' ? 1 : 0;
    int expected = -1;
    if (!state().compare_exchange_strong(expected, s)) s = expected;  // a test chose meanwhile
  }
  return s == 1;
}

void set_pending_kernels(bool on) { state().store(on ? 1 : 0); }

}  // namespace gpipe::ops::cuda
