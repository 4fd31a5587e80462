// gpipe_tokenize: runs a TextTokenizer over lines of text, for comparing it
// with other implementations (benchmarks/tokenizer_compare.py).
//
//   gpipe_tokenize --tokenizer=PATH/tokenizer.json < lines.txt > ids.txt
//   gpipe_tokenize --tokenizer=... --decode < ids.txt > lines.txt
//
// Each input line (without its '\n') becomes one output line: its ids,
// separated by spaces (or, with --decode, the text of a line of ids). The
// time spent encoding alone, without reading and writing, goes to stderr as
// "encoded B bytes of text in S s: X MB/s".
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "data/text_tokenizer.h"

int main(int argc, char** argv) {
  CLI::App app{"gpipe_tokenize: encode (or decode) lines of stdin with a tokenizer"};
  std::string spec = "bytes";
  bool decode = false;
  app.add_option("--tokenizer", spec, "bytes, or PATH/tokenizer.json");
  app.add_flag("--decode", decode, "read lines of ids, write their text");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto tok = gpipe::make_text_tokenizer(spec);
    std::ios::sync_with_stdio(false);
    std::string line, out;
    double seconds = 0;
    size_t bytes = 0;
    while (std::getline(std::cin, line)) {
      if (decode) {
        std::istringstream in(line);
        std::vector<int64_t> ids;
        for (int64_t id; in >> id;) ids.push_back(id);
        out += tok->decode(ids);
      } else {
        const auto start = std::chrono::steady_clock::now();
        const std::vector<int64_t> ids = tok->encode(line);
        seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
