// gpipe_train: train a Transformer (iso-codes translation) or an
// AmoebaNet-D (Fashion-MNIST) through a GPipe pipeline. A thin main over
// tools/train/trainer.h; see `gpipe_train --help` and README.md.
//   bazel run //tools:gpipe_train -- --model=transformer --K=2 --M=4 --steps=200
//   mpirun -np 4 bazel-bin/tools/gpipe_train --model=transformer --K=2 --replicas=2 --M=4
//   --steps=200
// Exit status: 0 done, 1 runtime error (data, checkpoint, I/O), 2 usage error.
// Under mpirun every rank checks that all ranks got the same flags; a
// failure on one rank after start-up ends the whole job (MPI_Abort) with the
// failing rank's message, so no rank is left waiting; a rank that mpirun
// ends for another's failure says what it was waiting for (Note [Ended by
// the launcher]).
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/watchdog.h"
#include "runtime/mpi.h"
#include "tools/train/config.h"
#include "tools/train/trainer.h"

namespace {

// Note [Ended by the launcher]: once a rank of the job fails or dies, mpirun
// ends every other rank with SIGTERM (SIGKILL a second later), usually long
// before their --timeout. mpirun's message names only the lost rank and its
// host; the ranks it ends know what they were waiting for, which names the
// lost rank's stage and the micro-batch too ("waiting for gradients of stage
// 1 (rank 1) to stage 0 (rank 0), micro-batch 1"). So under mpirun SIGTERM is
// blocked in every thread (before MPI starts its own) and one thread takes
// it, prints what the running step waits for (Watchdog::running_steps), and
// lets SIGTERM end the process as it would have. A rank that has already
// reported its own failure stays quiet.
std::atomic<bool> g_failure_reported{false};
std::atomic<int> g_rank{-1};

void say_what_waited_on_sigterm() {
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, nullptr);
  std::thread([term] {
    int sig = 0;
    sigwait(&term, &sig);
    if (!g_failure_reported.load()) {
      const std::string steps = gpipe::Watchdog::running_steps();
      std::fprintf(stderr,
                   "gpipe_train: rank %d: ended by SIGTERM (how mpirun ends the other ranks when "
                   "one fails) %s%s\n",
                   g_rank.load(), steps.empty() ? "outside a step" : "in ", steps.c_str());
      std::fflush(stderr);
    }
    std::signal(SIGTERM, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &term, nullptr);
    std::raise(SIGTERM);
  }).detach();
}

// "" if every rank got the same flags (compared after parsing, so order and
// spelling do not matter), else one line naming the ranks that differ.
std::string flag_mismatch(gpipe::Communicator& world, const std::vector<std::string>& args) {
  std::string mine;
  try {
    mine = gpipe::train::canonical_flags(args);
  } catch (const gpipe::train::HelpRequested&) {
    mine = "--help";
  } catch (const std::exception& e) {
    mine = std::string("error: ") + e.what();  // every rank reports it after the comparison
  }
  const std::vector<std::string> all = world.allgather(mine, "comparing the flags of all ranks");
  std::string differ;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (differ.empty()) return "";
  return "the ranks were started with different flags: rank(s) " + differ +
         " differ from rank 0 (every rank must get the same command line)";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpipe::train;
  const std::vector<std::string> args(argv + 1, argv + argc);
  std::shared_ptr<gpipe::Communicator> world;
  std::string who = "gpipe_train";
  try {
    if (gpipe::mpi::launched_by_mpirun()) {
      // Lines reach mpirun as they are written, even if the job is killed later.
      std::setvbuf(stdout, nullptr, _IOLBF, 0);
      say_what_waited_on_sigterm();
      world = gpipe::mpi::world();
      g_rank = world->rank();
      if (world->size() > 1) who = "gpipe_train: rank " + std::to_string(world->rank());
      const std::string mismatch = flag_mismatch(*world, args);
      if (!mismatch.empty()) throw UsageError(mismatch);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", who.c_str(), e.what());
    return 2;
  }
  TrainConfig config;
  try {
    // Parsing is the same on every rank: each prints the same error and exits.
    config = parse_train_flags(args);
  } catch (const HelpRequested& h) {
    if (!world || world->rank() == 0) std::cout << h.text;
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: error: %s\n(see gpipe_train --help)\n", who.c_str(), e.what());
    return 2;
  }
  const bool several = world && world->size() > 1;
  try {
    train(config, std::cout, world);
    return 0;
  } catch (const UsageError& e) {
    // Checked before any step, alike on every rank (process count, K x R).
    std::fprintf(stderr, "%s: error: %s\n(see gpipe_train --help)\n", who.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    g_failure_reported = true;
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", who.c_str(), e.what());
    std::fflush(stderr);
    // The other ranks may be waiting on this one: end them all now.
    if (several) gpipe::mpi::abort_job(1);
    return 1;
  }
}
