// How gpipe calls MPI (private to runtime/mpi*.cc): every call under one
// process-wide mutex (MPI_THREAD_SERIALIZED), status codes turned into
// gpipe::Error, and waits as polls against a deadline, so a stuck peer makes
// the waiting rank throw instead of hang. After a timeout the process is
// "broken": it makes no further MPI call that could progress a request into
// freed memory (it is about to end the job: tools/gpipe_train.cc).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/error.h"
#include "runtime/communicator.h"
#include "runtime/mailbox.h"  // Aborted

namespace gpipe::mpi::internal {

using Clock = std::chrono::steady_clock;

constexpr int kMaxChunk = 1 << 30;  // bytes per MPI message (counts are int)

// The mutex every MPI call in this process holds.
std::mutex& mpi_mutex();

// Whether a wait has timed out in this process; mark_broken() sets it.
bool broken();
void mark_broken();

// Throws gpipe::Error naming `what` once the process is broken.
void check_usable(const std::string& what);

// Throws gpipe::Error "<call> failed: <MPI's text>" unless rc is MPI_SUCCESS.
void check(int rc, const char* call);

// Micro-batch m's tag, wrapped into [0, MPI_TAG_UB].
int wrap_tag(int m);

// Polls `done()` (which makes one MPI call under the mutex) until it returns
// true; sleeps a little longer each time (up to `max_pause`) so a waiting
// rank does not steal its neighbour's core; throws after `timeout` with
// `what_waited`, or Aborted once `*aborted` is set.
template <class Done, class What>
void poll_until(Done done, std::chrono::duration<double> timeout, What what_waited,
                const std::atomic<bool>* aborted = nullptr,
                std::chrono::microseconds max_pause = std::chrono::microseconds(500)) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  auto pause = std::chrono::microseconds(2);
  while (true) {
    check_usable(what_waited());
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      if (done()) return;
    }
    if (aborted && aborted->load()) throw Aborted(detail::concat(what_waited(), ": aborted"));
    if (Clock::now() > deadline) {
      mark_broken();
      throw Error(detail::concat("timed out after ", timeout.count(), " s waiting for ",
                                 what_waited(),
                                 " (is a rank stuck or dead? raise --timeout for slow steps)"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, max_pause);
  }
}

// Waits for a non-blocking collective, polling often: it advances only
// inside MPI calls, one round per call (a large all-reduce has many rounds).
void wait_request(MPI_Request* req, double timeout, const std::string& what);

// MpiTransport (mpi_transport.cc): one direction of the boundary with `peer`
// over `comm`, a communicator of its own.
std::unique_ptr<Transport> make_transport(MPI_Comm comm, int peer, Device device, std::string name,
                                          double timeout);

}  // namespace gpipe::mpi::internal
