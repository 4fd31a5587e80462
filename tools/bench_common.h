// Shared plumbing for gpipe_bench subcommands: timing, fair OpenBLAS
// environment, and running the PyTorch/numpy side of a comparison.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace gpipe::bench {

struct Timing {
  double best_s = 0, median_s = 0;
  int repeats = 0;
};

// Runs fn twice untimed, then until at least `min_repeats` and `min_seconds`
// (at most `max_repeats`).
Timing time_it(const std::function<void()>& fn, int min_repeats = 5, double min_seconds = 2.0,
               int max_repeats = 50);

// If OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are set, re-executes this process
// without them (they pin OpenBLAS to slower kernels; BENCHMARKS.md asks both
// sides of a comparison to run without them). Returns a note for the output.
std::string ensure_fair_openblas_env(int argc, char** argv);

// Runs `command` through /bin/sh and returns its stdout lines; throws on a
// non-zero exit with the command named.
std::vector<std::string> run_lines(const std::string& command);

// Path of a file shipped with the benchmarks (works under `bazel run` and
// from the source tree).
std::string data_path(const std::string& relative);

// Minimal JSON field readers for the one-line JSON objects the Python sides print.
double json_number(const std::string& line, const std::string& key);
bool json_bool(const std::string& line, const std::string& key);

}  // namespace gpipe::bench
