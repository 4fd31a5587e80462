#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/fuzz/fuzz.h"

namespace gpipe::fuzz {

namespace {
struct Scratch {
  std::filesystem::path dir;
  Scratch() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gpipe_fuzz_XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    dir = tmpl;
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};
Scratch& scratch() {
  static Scratch s;
  return s;
}
}  // namespace

std::string scratch_dir() { return scratch().dir.string(); }

bool names_file(const std::string& a) {
  if (a.find("file:") != std::string::npos) return true;
  for (const char* flag : {"--checkpoint", "--data", "--resume", "--trace", "--schedule-svg",
                           "--log", "--save", "--out", "--plan", "--config"})
    if (a.rfind(flag, 0) == 0) return true;
  return false;
}

std::vector<std::string> split_lines(std::string_view text, size_t max) {
  std::vector<std::string> lines;
  size_t at = 0;
  while (at <= text.size() && lines.size() < max) {
    const size_t end = std::min(text.find('\n', at), text.size());
    lines.emplace_back(text.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

std::string write_file(const std::string& name, std::string_view contents) {
  const std::string path = (scratch().dir / name).string();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  f.close();
  if (!f) std::abort();
  return path;
}

}  // namespace gpipe::fuzz
