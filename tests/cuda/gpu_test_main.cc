// main() for the tests in tests/cuda that need a GPU. Catch2 v2 cannot skip,
// so without a CUDA device the binary prints one line and exits 0 before
// running any test case; bazel then reports it PASSED, and the log says why.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>

#include "runtime/cuda/device.h"

int main(int argc, char* argv[]) {
  if (gpipe::cuda::device_count() == 0) {
    std::printf("SKIPPED: no CUDA device found\n");
    return 0;
  }
  return Catch::Session().run(argc, argv);
}
