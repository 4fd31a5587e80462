// The ordinary suite's side of the fuzz harnesses (tests/fuzz/fuzz.h): runs
// every file under the folders given on the command line through the
// harness linked in, once each, in name order. Fails (exit 1) when a folder
// is missing or empty; a crash or an uncaught exception ends the process.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR...\n", argv[0]);
    return 2;
  }
  int total = 0;
  for (int a = 1; a < argc; ++a) {
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(argv[a], ec))
      if (e.is_regular_file()) files.push_back(e.path());
    if (ec || files.empty()) {
      std::fprintf(stderr, "replay: no inputs under %s\n", argv[a]);
      return 1;
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& p : files) {
      std::ifstream in(p, std::ios::binary);
      const std::string data((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      std::printf("replay %s (%zu bytes)\n", p.c_str(), data.size());
      std::fflush(stdout);
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size());
      ++total;
    }
  }
  std::printf("replayed %d inputs: no crash\n", total);
  return 0;
}
