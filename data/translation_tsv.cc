// Line-by-line parsing of source<TAB>target files (data/translation_tsv.h).
// The whole file is read at once: translation corpora that a CPU or one
// pipeline trains on fit in memory many times over.
#include "data/translation_tsv.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace gpipe {

std::vector<TranslationPair> parse_translation_tsv(std::string_view text, const std::string& name) {
  std::vector<TranslationPair> pairs;
  int64_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t tab = line.find('\t');
    GPIPE_CHECK(tab != std::string_view::npos, name, ":", line_no,
                ": expected source<TAB>target, found no tab");
    const size_t tabs =
        1 + static_cast<size_t>(std::count(line.begin() + tab + 1, line.end(), '\t'));
    GPIPE_CHECK(tabs == 1, name, ":", line_no, ": expected source<TAB>target (one tab), found ",
                tabs, " tabs");
    GPIPE_CHECK(tab > 0, name, ":", line_no, ": expected source<TAB>target, the source is empty");
    GPIPE_CHECK(tab + 1 < line.size(), name, ":", line_no,
                ": expected source<TAB>target, the target is empty");
    pairs.push_back(TranslationPair{std::string(line.substr(0, tab)),
                                    std::string(line.substr(tab + 1)), std::string()});
  }
  return pairs;
}

std::vector<TranslationPair> read_translation_tsv(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  GPIPE_CHECK(f.is_open(), "translation data '", path,
              "': cannot open it (expected a file of source<TAB>target lines)");
  std::ostringstream text;
  text << f.rdbuf();
  GPIPE_CHECK(!f.bad(), "translation data '", path, "': read error");
  std::vector<TranslationPair> pairs = parse_translation_tsv(text.str(), path);
  GPIPE_CHECK(!pairs.empty(), "translation data '", path,
              "': holds no pairs (expected source<TAB>target lines)");
  return pairs;
}

}  // namespace gpipe
