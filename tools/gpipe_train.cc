// gpipe_train: train a Transformer (iso-codes translation) or an
// AmoebaNet-D (Fashion-MNIST) through a GPipe pipeline. A thin main over
// tools/train/trainer.h; see `gpipe_train --help` and README.md.
//   bazel run //tools:gpipe_train -- --model=transformer --K=2 --M=4 --steps=200
// Exit status: 0 done, 1 runtime error (data, checkpoint, I/O), 2 usage error.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "tools/train/config.h"
#include "tools/train/trainer.h"

int main(int argc, char** argv) {
  using namespace gpipe::train;
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    train(parse_train_flags(args), std::cout);
    return 0;
  } catch (const HelpRequested& h) {
    std::cout << h.text;
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "gpipe_train: error: %s\n(see gpipe_train --help)\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "gpipe_train: error: %s\n", e.what());
    return 1;
  }
}
