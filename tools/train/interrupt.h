// SIGINT and SIGTERM stop a run cleanly (Note [Clean stop] in interrupt.cc).
//
// install_interrupt_handler() installs the handler of both signals (except
// one the parent set to be ignored) and the thread that reports them. The
// training loop polls interrupt_signal() between steps; a second signal exits
// at once with 128 + its number.
#pragma once

#include <stdexcept>
#include <string>

namespace gpipe::train {

// `who` prefixes the lines it prints ("gpipe_train", "gpipe_train: rank 1");
// `under_mpirun`: a SIGTERM may be mpirun ending this rank for another's
// failure, so the line also says what the running step waits for.
void install_interrupt_handler(const std::string& who, bool under_mpirun);
void set_interrupt_who(const std::string& who);

// The first SIGINT / SIGTERM received, or 0.
int interrupt_signal();
// Tests: as if `sig` had arrived (0 clears).
void simulate_interrupt(int sig);

// This process has reported its own failure: a SIGTERM from mpirun that
// follows needs no line of its own.
void mark_failure_reported();

// Thrown by the training loop once it has stopped for a signal (and saved,
// with --save); main exits with 128 + signal.
class Interrupted : public std::runtime_error {
 public:
  Interrupted(int sig, const std::string& what) : std::runtime_error(what), signal(sig) {}
  int signal;
};

// "SIGINT", "SIGTERM", or "signal N".
std::string signal_name(int sig);

}  // namespace gpipe::train
