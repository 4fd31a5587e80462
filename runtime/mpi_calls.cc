// The MPI call discipline of mpi_calls.h: the mutex, the broken flag, status
// codes and tags.
#include "runtime/mpi_calls.h"

#include <cstdint>

namespace gpipe::mpi::internal {
namespace {

std::atomic<bool> g_broken{false};

// The largest tag (MPI guarantees at least 32767).
int tag_limit() {
  static const int limit = [] {
    int flag = 0;
    int* value = nullptr;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &flag);
    return flag && value ? *value : 32767;
  }();
  return limit;
}

}  // namespace

std::mutex& mpi_mutex() {
  static std::mutex mu;
  return mu;
}

bool broken() { return g_broken.load(); }
void mark_broken() { g_broken = true; }

void check_usable(const std::string& what) {
  if (broken())
    throw Error(detail::concat(what, ": MPI is unusable after an earlier timeout in this process"));
}

// Computed in 64 bits: MPI_TAG_UB is often INT_MAX, and INT_MAX + 1 overflows an int.
int wrap_tag(int m) { return static_cast<int>(m % (static_cast<int64_t>(tag_limit()) + 1)); }

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(detail::concat(call, " failed: ", std::string(text, len)));
}

void wait_request(MPI_Request* req, double timeout, const std::string& what) {
  poll_until(
      [&] {
        int flag = 0;
        check(MPI_Test(req, &flag, MPI_STATUS_IGNORE), "MPI_Test");
        return flag != 0;
      },
      std::chrono::duration<double>(timeout), [&] { return what; }, nullptr,
      std::chrono::microseconds(10));
}

}  // namespace gpipe::mpi::internal
