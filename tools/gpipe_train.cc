// gpipe_train: train a Transformer (iso-codes translation) or an
// AmoebaNet-D (Fashion-MNIST) through a GPipe pipeline. A thin main over
// tools/train/trainer.h; see `gpipe_train --help` and README.md.
//   bazel run //tools:gpipe_train -- --model=transformer --K=2 --M=4 --steps=200
//   mpirun -np 4 bazel-bin/tools/gpipe_train --model=transformer --K=2 --replicas=2 --M=4
//   --steps=200
// Exit status: 0 done, 1 runtime error (data, checkpoint, I/O, memory), 2 usage error,
// 128 + N stopped by signal N (130 SIGINT, 143 SIGTERM).
// Under mpirun every rank checks that all ranks got the same flags; a
// failure on one rank after start-up ends the whole job (MPI_Abort) with the
// failing rank's message, so no rank is left waiting; a rank that mpirun
// ends for another's failure says what it was waiting for (Note [Ended by
// the launcher] in tools/train/interrupt.cc). SIGINT and SIGTERM stop the run
// after the step in flight, save with --save and exit with 128 + the signal
// (Note [Clean stop] in tools/train/interrupt.cc).
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "runtime/mpi.h"
#include "tools/train/config.h"
#include "tools/train/interrupt.h"
#include "tools/train/trainer.h"
#include "tools/train/version.h"

namespace {

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
  if (gpipe::print_version_if_asked(argc, argv, "gpipe_train")) return 0;
  const std::vector<std::string> args(argv + 1, argv + argc);
  std::shared_ptr<gpipe::Communicator> world;
  std::string who = "gpipe_train";
  // Before any thread starts (MPI's included): SIGINT and SIGTERM go to one thread.
  install_interrupt_handler(who, gpipe::mpi::launched_by_mpirun());
  try {
    if (gpipe::mpi::launched_by_mpirun()) {
      // Lines reach mpirun as they are written, even if the job is killed later.
      std::setvbuf(stdout, nullptr, _IOLBF, 0);
      world = gpipe::mpi::world();
      if (world->size() > 1) who = "gpipe_train: rank " + std::to_string(world->rank());
      set_interrupt_who(who);
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
  } catch (const Interrupted& stop) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", who.c_str(), stop.what());
    return 128 + stop.signal;
  } catch (const std::exception& e) {
    mark_failure_reported();
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", who.c_str(), e.what());
    std::fflush(stderr);
    // The other ranks may be waiting on this one: end them all now.
    if (several) gpipe::mpi::abort_job(1);
    return 1;
  }
}
