// gpipe_train: train a Transformer (iso-codes translation) or an
// AmoebaNet-D (Fashion-MNIST) through a GPipe pipeline. A thin main over
// tools/train/trainer.h; see `gpipe_train --help` and README.md.
//   bazel run //tools:gpipe_train -- --model=transformer --K=2 --M=4 --steps=200
//   mpirun -np 4 bazel-bin/tools/gpipe_train --model=transformer --K=2 --replicas=2 --M=4
//   --steps=200
// Exit status: 0 done, 1 runtime error (data, checkpoint, I/O), 2 usage error.
// Under mpirun every rank checks that all ranks got the same flags; a
// failure on one rank after start-up ends the whole job (MPI_Abort) with the
// failing rank's message, so no rank is left waiting.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "runtime/mpi.h"
#include "tools/train/config.h"
#include "tools/train/trainer.h"

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
  const std::vector<std::string> args(argv + 1, argv + argc);
  std::shared_ptr<gpipe::Communicator> world;
  std::string who = "gpipe_train";
  try {
    if (gpipe::mpi::launched_by_mpirun()) {
      // Lines reach mpirun as they are written, even if the job is killed later.
      std::setvbuf(stdout, nullptr, _IOLBF, 0);
      world = gpipe::mpi::world();
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
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", who.c_str(), e.what());
    std::fflush(stderr);
    // The other ranks may be waiting on this one: end them all now.
    if (several) gpipe::mpi::abort_job(1);
    return 1;
  }
}
