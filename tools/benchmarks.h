// The benchmarks behind `gpipe_bench <name>`; each prints gpipe's figures
// beside the reference's from the same run (ratios, not lone times).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe::bench {

struct GemmBenchOptions {
  std::vector<int64_t> sizes{512, 1024, 2048};
  std::vector<int> threads{1, 2};
  double min_seconds = 2.0;
  std::string python = "/usr/bin/python3";  // Debian's numpy (OpenBLAS)
  bool skip_numpy = false;
  std::string env_note;
};
int run_gemm(const GemmBenchOptions& opt);

}  // namespace gpipe::bench
