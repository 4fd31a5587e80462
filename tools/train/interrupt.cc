// Note [Clean stop]. A user's Ctrl-C and a batch scheduler's SIGTERM (sent
// before a preemption or at a time limit) must not lose the steps since the
// last --save-every. A handler for both signals records the first one and
// wakes a thread that says so (a handler may do little more, and any thread,
// OpenBLAS's included, may be the one interrupted); the training loop looks
// at the record between steps, so the step in flight finishes on every
// stage. Under mpirun (which forwards SIGINT and SIGTERM to every rank) the
// ranks may see the signal at different steps, so after each step they take
// the largest signal number over the job (one tiny all-reduce) and all stop
// after the same step. The loop then saves the last completed step, as
// --save-every does (a sharded checkpoint under mpirun), prints one line and
// the process exits with 128 + the signal's number. A second signal exits at
// once, the way an impatient user expects.
//
// Note [Ended by the launcher]: once a rank of the job fails or dies, mpirun
// ends every other rank with SIGTERM (SIGKILL a little later), usually long
// before their --timeout. mpirun's message names only the lost rank and its
// host; the ranks it ends know what they were waiting for, which names the
// lost rank's stage and the micro-batch too ("waiting for gradients of stage
// 1 (rank 1) to stage 0 (rank 0), micro-batch 1"). So under mpirun the line a
// SIGTERM prints says what the running step waits for (Watchdog::
// running_steps). A rank that has already reported its own failure stays
// quiet.
#include "tools/train/interrupt.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <thread>

#include "pipeline/watchdog.h"

namespace gpipe::train {
namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_failure_reported{false};
// The name lines start with; the handler reads it too (set before any signal).
char g_who_raw[128] = "gpipe";
std::mutex g_who_mu;  // guards writes of g_who_raw and its reads outside the handler

std::string who() {
  std::lock_guard<std::mutex> lock(g_who_mu);
  return g_who_raw;
}

// What the handler may touch: lock-free atomics, write() and _exit().
std::atomic<int> g_wake_fd{-1};

void write_all(const char* text) {
  size_t n = 0;
  while (text[n] != '\0') ++n;
  while (n > 0) {
    const ssize_t w = write(STDERR_FILENO, text, n);
    if (w <= 0) return;
    text += w, n -= static_cast<size_t>(w);
  }
}

void on_signal(int sig) {
  int none = 0;
  if (g_signal.compare_exchange_strong(none, sig)) {
    const char byte = 1;
    const int fd = g_wake_fd.load();
    if (fd >= 0 && write(fd, &byte, 1) < 0) {
    }
    return;
  }
  // The second signal: no more waiting.
  write_all(g_who_raw);
  write_all(sig == SIGINT ? ": second signal (SIGINT): exiting at once\n"
                          : ": second signal (SIGTERM): exiting at once\n");
  _exit(128 + sig);
}

}  // namespace

std::string signal_name(int sig) {
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(sig);
}

void set_interrupt_who(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_who_mu);
  std::snprintf(g_who_raw, sizeof(g_who_raw), "%s", name.c_str());
}

int interrupt_signal() { return g_signal.load(); }
void simulate_interrupt(int sig) { g_signal = sig; }
void mark_failure_reported() { g_failure_reported = true; }

void install_interrupt_handler(const std::string& name, bool under_mpirun) {
  set_interrupt_who(name);
  static int pipe_fds[2] = {-1, -1};
  if (pipe_fds[0] >= 0 || pipe2(pipe_fds, O_CLOEXEC) != 0) return;
  g_wake_fd = pipe_fds[1];
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction now {};
    // A signal the parent set to be ignored stays ignored (a shell's
    // background job ignores SIGINT): only the others are taken.
    if (sigaction(sig, nullptr, &now) == 0 && now.sa_handler == SIG_IGN) continue;
    struct sigaction take {};
    take.sa_handler = on_signal;
    take.sa_flags = SA_RESTART;  // reads, writes and MPI calls in flight go on
    sigemptyset(&take.sa_mask);
    sigaction(sig, &take, nullptr);
  }
  // The handler only records the signal and wakes this thread, which says so.
  std::thread([read_fd = pipe_fds[0], under_mpirun] {
    char byte = 0;
    while (read(read_fd, &byte, 1) != 1) {
    }
    const int sig = g_signal.load();
    if (g_failure_reported.load()) return;
    std::string line = who() + ": " + signal_name(sig) + " received";
    if (under_mpirun && sig == SIGTERM) {
      // What the running step waits for (Note [Ended by the launcher]).
      const std::string steps = Watchdog::running_steps();
      line = who() + ": ended by SIGTERM (how mpirun ends the other ranks when one fails, and " +
             "forwards a scheduler's stop) " + (steps.empty() ? "outside a step" : "in " + steps);
    }
    std::fprintf(stderr, "%s; stopping after the step in flight (a second signal exits at once)\n",
                 line.c_str());
    std::fflush(stderr);
  }).detach();
}

}  // namespace gpipe::train
