#include "tools/bench/common.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "core/error.h"

namespace gpipe::bench {

Timing time_it(const std::function<void()>& fn, int min_repeats, double min_seconds,
               int max_repeats) {
  using clock = std::chrono::steady_clock;
  fn();
  fn();
  std::vector<double> times;
  const auto start = clock::now();
  while (static_cast<int>(times.size()) < max_repeats &&
         (static_cast<int>(times.size()) < min_repeats ||
          std::chrono::duration<double>(clock::now() - start).count() < min_seconds)) {
    const auto t0 = clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(clock::now() - t0).count());
  }
  Timing t;
  t.repeats = static_cast<int>(times.size());
  t.best_s = *std::min_element(times.begin(), times.end());
  std::sort(times.begin(), times.end());
  t.median_s = times[times.size() / 2];
  return t;
}

std::string ensure_fair_openblas_env(int argc, char** argv) {
  const bool set = std::getenv("OPENBLAS_CORETYPE") || std::getenv("OPENBLAS_L2_SIZE");
  if (set && !std::getenv("GPIPE_BENCH_REEXEC")) {
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("OPENBLAS_L2_SIZE");
    setenv("GPIPE_BENCH_REEXEC", "1", 1);
    execv("/proc/self/exe", argv);
    throw Error("gpipe_bench: could not re-execute itself without OPENBLAS_CORETYPE");
  }
  return std::getenv("GPIPE_BENCH_REEXEC") ? "OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE were unset for "
                                             "both sides (OpenBLAS picks its kernels)"
                                           : "OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE not set";
}

std::vector<std::string> run_lines(const std::string& command) {
  FILE* p = popen(command.c_str(), "r");
  GPIPE_CHECK(p != nullptr, "could not run: ", command);
  std::vector<std::string> lines;
  std::array<char, 4096> buf;
  std::string cur;
  while (fgets(buf.data(), buf.size(), p)) {
    cur += buf.data();
    if (!cur.empty() && cur.back() == '\n') {
      cur.pop_back();
      lines.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) lines.push_back(cur);
  const int rc = pclose(p);
  GPIPE_CHECK(rc == 0, "command failed (exit ", rc, "): ", command);
  return lines;
}

std::string data_path(const std::string& relative) {
  namespace fs = std::filesystem;
  if (fs::exists(relative)) return relative;
  if (const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY")) {
    const fs::path p = fs::path(ws) / relative;
    if (fs::exists(p)) return p.string();
  }
  const fs::path exe = fs::read_symlink("/proc/self/exe");
  const fs::path runfiles = fs::path(exe.string() + ".runfiles") / "gpipe" / relative;
  if (fs::exists(runfiles)) return runfiles.string();
  throw Error(detail::concat("benchmark file '", relative,
                             "' not found (run from the repository root "
                             "or with bazel run)"));
}

double json_number(const std::string& line, const std::string& key) {
  const auto at = line.find("\"" + key + "\":");
  GPIPE_CHECK(at != std::string::npos, "expected key '", key, "' in: ", line);
  return std::strtod(line.c_str() + at + key.size() + 3, nullptr);
}

bool json_bool(const std::string& line, const std::string& key) {
  const auto at = line.find("\"" + key + "\":");
  GPIPE_CHECK(at != std::string::npos, "expected key '", key, "' in: ", line);
  return line.compare(at + key.size() + 3, 5, " true") == 0 ||
         line.compare(at + key.size() + 3, 4, "true") == 0;
}

std::string json_string(const std::string& line, const std::string& key) {
  const auto at = line.find("\"" + key + "\":");
  GPIPE_CHECK(at != std::string::npos, "expected key '", key, "' in: ", line);
  const auto open = line.find('"', at + key.size() + 3);
  GPIPE_CHECK(open != std::string::npos, "expected a string for '", key, "' in: ", line);
  std::string out;
  for (size_t i = open + 1; i < line.size() && line[i] != '"'; ++i) {
    if (line[i] == '\\' && i + 1 < line.size()) ++i;
    out += line[i];
  }
  return out;
}

bool json_has(const std::string& line, const std::string& key) {
  return line.find("\"" + key + "\":") != std::string::npos;
}

std::string self_exe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

std::string python_command(const std::string& python, const std::string& script, int threads,
                           const std::string& args) {
  const std::string t = std::to_string(threads);
  return "OMP_NUM_THREADS=" + t + " OPENBLAS_NUM_THREADS=" + t + " MKL_NUM_THREADS=" + t + " " +
         python + " " + data_path("benchmarks/" + script) + " " + args;
}

std::string run_json(const std::string& command) {
  std::string json;
  for (const std::string& line : run_lines(command))
    if (!line.empty() && line[0] == '{') json = line;
  GPIPE_CHECK(!json.empty(), "no JSON result from: ", command);
  return json;
}

std::string try_run_json(const std::string& command) {
  try {
    return run_json(command);
  } catch (const std::exception& e) {
    std::printf("# reference failed: %s\n", e.what());
    std::fflush(stdout);
    return "";
  }
}

std::string default_torch_python() {
  namespace fs = std::filesystem;
  std::string venv;
  if (const char* v = std::getenv("GPIPE_BENCH_VENV"))
    venv = v;
  else if (const char* home = std::getenv("HOME"))
    venv = std::string(home) + "/.cache/gpipe-bench-venv";
  if (!venv.empty() && fs::exists(fs::path(venv) / "bin" / "python"))
    return (fs::path(venv) / "bin" / "python").string();
  return "/usr/bin/python3";
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

}  // namespace gpipe::bench
