// gpipe_tokenize: runs a TextTokenizer over lines of text, for comparing it
// with other implementations (benchmarks/tokenizer_compare.py).
//
//   gpipe_tokenize --tokenizer=PATH/tokenizer.json < lines.txt > ids.txt
//   gpipe_tokenize --tokenizer=... --decode < ids.txt > lines.txt
//   gpipe_tokenize --tokenizer=... --nul < documents > ids.txt
//
// Each input line (without its '\n'; with --nul, each NUL-terminated record,
// newlines and all) becomes one output line: its ids, separated by spaces
// (or, with --decode, the text of a line of ids). The
// time spent encoding alone, without reading and writing, goes to stderr as
// "encoded B bytes of text in S s: X MB/s".
#include <time.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "data/text_tokenizer.h"

namespace {

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpipe_tokenize: encode (or decode) lines of stdin with a tokenizer"};
  std::string spec = "bytes";
  bool decode = false;
  bool nul = false;
  app.add_option("--tokenizer", spec, "bytes, or PATH/tokenizer.json");
  app.add_flag("--decode", decode, "read lines of ids, write their text");
  app.add_flag("--nul", nul, "records end with NUL, not a newline (text with newlines)");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto tok = gpipe::make_text_tokenizer(spec);
    std::ios::sync_with_stdio(false);
    std::string line, out;
    double seconds = 0;
    size_t bytes = 0;
    while (std::getline(std::cin, line, nul && !decode ? '\0' : '\n')) {
      if (decode) {
        std::istringstream in(line);
        std::vector<int64_t> ids;
        for (int64_t id; in >> id;) ids.push_back(id);
        out += tok->decode(ids);
      } else {
        const double start = thread_cpu_seconds();
        const std::vector<int64_t> ids = tok->encode(line);
        seconds += thread_cpu_seconds() - start;
        bytes += line.size();
        for (size_t i = 0; i < ids.size(); ++i) {
          if (i > 0) out += ' ';
          out += std::to_string(ids[i]);
        }
      }
      out += '\n';
      if (out.size() > (1 << 20)) {
        std::fwrite(out.data(), 1, out.size(), stdout);
        out.clear();
      }
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    if (!decode)
      std::fprintf(stderr, "encoded %zu bytes of text in %.3f s: %.1f MB/s\n", bytes, seconds,
                   seconds > 0 ? bytes / seconds / 1e6 : 0.0);
    return 0;
  } catch (const gpipe::Error& e) {
    std::fprintf(stderr, "gpipe_tokenize: %s\n", e.what());
    return 1;
  }
}
