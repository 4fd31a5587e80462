// Reading is line-based and tolerant of what fortune files hold (tabs,
// trailing spaces, a final document without a closing "%"); packing keeps
// every token once, rows overlapping by the one token that is both the last
// target of a row and the first input of the next.
#include "data/lm_corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/allocator.h"
#include "core/error.h"
#include "core/rng.h"

namespace gpipe {

std::vector<Document> read_fortunes(const std::string& dir) {
  namespace fs = std::filesystem;
  GPIPE_CHECK(fs::is_directory(dir), "the default language-model corpus: directory '", dir,
              "' does not exist (tools/setup.sh installs Debian's fortunes package)");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && !e.is_symlink() && !e.path().has_extension())
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<Document> docs;
  for (const fs::path& f : files) {
    std::ifstream in(f);
    GPIPE_CHECK(in.good(), "cannot read '", f.string(), "'");
    std::string line, text;
    int64_t no = 0, first = 1;
    auto flush = [&] {
      if (text.find_first_not_of(" \t\n") != std::string::npos)
        docs.push_back({detail::concat(f.string(), ":", first), text});
      text.clear();
    };
    while (std::getline(in, line)) {
      ++no;
      if (line == "%") {
        flush();
        first = no + 1;
      } else {
        text += line;
        text += '\n';
      }
    }
    flush();
  }
  GPIPE_CHECK(!docs.empty(), "the default language-model corpus: no document in '", dir, "'");
  return docs;
}

void split_documents(const std::vector<Document>& docs, double held_out, uint64_t seed,
                     std::vector<Document>& train, std::vector<Document>& val) {
  GPIPE_CHECK(held_out >= 0 && held_out < 1, "the held-out fraction must be in [0, 1), got ",
              held_out);
  train.clear();
  val.clear();
  const uint64_t cut = static_cast<uint64_t>(held_out * 1e6);
  for (size_t i = 0; i < docs.size(); ++i)
    (mix_key(seed ^ 0x5eed, i) % 1000000 < cut ? val : train).push_back(docs[i]);
  if (docs.size() >= 2 && held_out > 0 && val.empty()) {
    val.push_back(train.back());
    train.pop_back();
  }
  if (docs.size() >= 2 && train.empty()) {
    train.push_back(val.back());
    val.pop_back();
  }
}

PackedRows pack(const std::vector<Document>& docs, const TextTokenizer& tok, int64_t context) {
  GPIPE_CHECK(context >= 1, "pack: the context must be >= 1 token, got ", context);
  std::vector<int32_t> stream;
  PackedRows p;
  p.context = context;
  for (const Document& d : docs) {
    p.doc_starts.push_back(static_cast<int64_t>(stream.size()));
    p.sources.push_back(d.source);
    for (const int64_t id : tok.encode(d.text)) stream.push_back(static_cast<int32_t>(id));
    stream.push_back(static_cast<int32_t>(tok.eot_id()));
    p.text_bytes += static_cast<int64_t>(d.text.size());
    ++p.documents;
  }
  p.stream_tokens = static_cast<int64_t>(stream.size());
  p.rows = p.stream_tokens > 0 ? (p.stream_tokens - 1) / context : 0;
  p.tokens.reserve(static_cast<size_t>(p.rows * (context + 1)));
  for (int64_t r = 0; r < p.rows; ++r)
    p.tokens.insert(p.tokens.end(), stream.begin() + r * context,
                    stream.begin() + r * context + context + 1);
  return p;
}

std::string row_source(const PackedRows& p, const TextTokenizer& tok, int64_t row) {
  GPIPE_CHECK(row >= 0 && row < p.rows, "lm rows: row ", row, " of ", p.rows);
  if (p.sources.empty()) return "";
  const int64_t at = row * p.context;
  const size_t doc = static_cast<size_t>(
      std::upper_bound(p.doc_starts.begin(), p.doc_starts.end(), at) - p.doc_starts.begin() - 1);
  // The stream's tokens [doc start, at): row r holds stream offsets [r T, r T + T].
  std::vector<int64_t> before;
  for (int64_t x = p.doc_starts[doc]; x < at; ++x)
    before.push_back(
        p.tokens[static_cast<size_t>((x / p.context) * (p.context + 1) + x % p.context)]);
  const std::string& source = p.sources[doc];
  const size_t colon = source.rfind(':');
  const bool has_line = colon != std::string::npos && colon + 1 < source.size() &&
                        std::all_of(source.begin() + static_cast<std::ptrdiff_t>(colon) + 1,
                                    source.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) &&
                        source.size() - colon - 1 <= 12;
  if (!has_line)
    return before.empty() ? source : detail::concat(source, " +", before.size(), " tokens");
  int64_t line = std::stoll(source.substr(colon + 1));
  const std::string text = tok.decode(before);
  line += std::count(text.begin(), text.end(), '\n');
  return detail::concat(source.substr(0, colon), ":", line);
}

namespace {
Tensor slice_rows(const PackedRows& p, const std::vector<int64_t>& rows, int64_t skip) {
  MemoryCategoryGuard cat(MemoryCategory::kWorkspace);
  const int64_t t = p.context, n = static_cast<int64_t>(rows.size());
  std::vector<int64_t> v(static_cast<size_t>(n * t));
  for (int64_t i = 0; i < n; ++i) {
    GPIPE_CHECK(rows[i] >= 0 && rows[i] < p.rows, "lm rows: row ", rows[i], " of ", p.rows);
    const int32_t* src = p.tokens.data() + rows[i] * (t + 1) + skip;
    std::copy(src, src + t, v.begin() + i * t);
  }
  return Tensor::from_vector(v, Shape{n, t});
}
}  // namespace

Tensor lm_inputs(const PackedRows& p, const std::vector<int64_t>& rows) {
  return slice_rows(p, rows, 0);
}
Tensor lm_targets(const PackedRows& p, const std::vector<int64_t>& rows) {
  return slice_rows(p, rows, 1);
}

}  // namespace gpipe
