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

// The median (the mean of the middle two for an even count); 0 for none.
double median_of(std::vector<double> v);

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
std::string json_string(const std::string& line, const std::string& key);
bool json_has(const std::string& line, const std::string& key);

// Absolute path of this executable (to run one measurement in a fresh
// process of itself: BENCHMARKS.md wants a fresh process per measurement).
std::string self_exe();

// "OMP_NUM_THREADS=t OPENBLAS_NUM_THREADS=t MKL_NUM_THREADS=t <python> <script> <args>"
// for a reference script shipped under benchmarks/.
std::string python_command(const std::string& python, const std::string& script, int threads,
                           const std::string& args);

// The last line of `command`'s output that starts with '{' (its JSON result).
std::string run_json(const std::string& command);

// run_json, but a failure prints "# reference failed: <why>" to stdout and
// returns "" (the gpipe side of a comparison still runs).
std::string try_run_json(const std::string& command);

// The PyTorch reference's python: the venv benchmarks/setup_torch.sh makes
// ($GPIPE_BENCH_VENV, else ~/.cache/gpipe-bench-venv) when it exists, else
// /usr/bin/python3 (Debian's python3-torch fallback).
std::string default_torch_python();

}  // namespace gpipe::bench
