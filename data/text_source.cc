// Note [Text sources]. The user's text is plain files in three formats, told
// apart by extension only (content sniffing would make a typo in a name a
// silent change of meaning). Folders are walked recursively and sorted by
// path, and glob matches are sorted, so the order of documents, and hence
// the held-out split and every batch, does not depend on the file system's
// directory order. A document is a file (--doc-split=file), the lines
// between blank lines (--doc-split=blank: paragraphs, or the records of a
// corpus written one per paragraph), or a .jsonl record's text field.
#include "data/text_source.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "optim/json.h"

namespace gpipe {
namespace {

namespace fs = std::filesystem;

bool is_pattern(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// A folder's regular files (following links to files), recursively, sorted.
std::vector<std::string> folder_files(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec),
      end;
  GPIPE_CHECK(!ec, "cannot list '", dir, "': ", ec.message());
  for (; it != end; it.increment(ec)) {
    GPIPE_CHECK(!ec, "cannot list '", dir, "': ", ec.message());
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] == '.') {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> glob_matches(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

void append_path(const std::string& path, const std::string& flag, const std::string& spec,
                 std::vector<std::string>& out) {
  if (fs::is_directory(path)) {
    const std::vector<std::string> files = folder_files(path);
    GPIPE_CHECK(!files.empty(), flag, "=", spec, ": the folder '", path, "' holds no file");
    for (const std::string& f : files) {
      (void)source_format(f);
      out.push_back(f);
    }
    return;
  }
  GPIPE_CHECK(fs::exists(path), flag, "=", spec, ": '", path, "' does not exist");
  GPIPE_CHECK(fs::is_regular_file(path), flag, "=", spec, ": '", path,
              "' is neither a file nor a folder");
  (void)source_format(path);
  out.push_back(path);
}

// Documents of a .txt file.
std::vector<Document> read_text(const std::string& path, const std::string& split) {
  GPIPE_CHECK(split == "file" || split == "blank", "--doc-split: unknown split '", split,
              "' (expected file or blank)");
  std::ifstream in(path, std::ios::binary);
  GPIPE_CHECK(in.good(), "cannot read '", path, "'");
  std::vector<Document> docs;
  auto blank = [](const std::string& s) {
    return s.find_first_not_of(" \t\r\n\f\v") == std::string::npos;
  };
  if (split == "file") {
    std::ostringstream all;
    all << in.rdbuf();
    std::string text = all.str();
    if (!blank(text)) docs.push_back({path + ":1", std::move(text)});
    return docs;
  }
  std::string line, text;
  int64_t no = 0, first = 1;
  while (std::getline(in, line)) {
    ++no;
    if (blank(line)) {
      if (!text.empty()) docs.push_back({detail::concat(path, ":", first), std::move(text)});
      text.clear();
      first = no + 1;
    } else {
      text += line;
      text += '\n';
    }
  }
  if (!text.empty()) docs.push_back({detail::concat(path, ":", first), std::move(text)});
  return docs;
}

std::vector<Document> read_jsonl(const std::string& path, const std::string& field) {
  namespace json = optim::json;
  std::ifstream in(path, std::ios::binary);
  GPIPE_CHECK(in.good(), "cannot read '", path, "'");
  std::vector<Document> docs;
  std::string line;
  for (int64_t no = 1; std::getline(in, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json::Value v;
    try {
      v = json::parse(line);
    } catch (const Error& e) {
      throw Error(detail::concat(path, ":", no, ": ", e.what(), " (expected one JSON object per ",
                                 "line)"));
    }
    GPIPE_CHECK(v.kind == json::Value::Kind::kObject, path, ":", no, ": a JSON ",
                json::kind_name(v.kind), ", expected an object with a \"", field, "\" string");
    const json::Value* text = v.find(field);
    GPIPE_CHECK(text != nullptr, path, ":", no, ": no \"", field,
                "\" key in the record (--text-field names the key holding the text)");
    GPIPE_CHECK(text->kind == json::Value::Kind::kString, path, ":", no, ": \"", field,
                "\" is a JSON ", json::kind_name(text->kind), ", expected a string");
    if (text->text.find_first_not_of(" \t\r\n") != std::string::npos)
      docs.push_back({detail::concat(path, ":", no), text->text});
  }
  return docs;
}

}  // namespace

const char* known_source_formats() {
  return "text (.txt), JSON lines (.jsonl), llm.c token shards (.bin)";
}

SourceFormat source_format(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".txt") return SourceFormat::kText;
  if (ext == ".jsonl") return SourceFormat::kJsonl;
  if (ext == ".bin") return SourceFormat::kShard;
  throw Error(detail::concat("'", path, "': unknown data format '", ext.empty() ? "(none)" : ext,
                             "' (known: ", known_source_formats(), ")"));
}

std::vector<std::string> expand_data_paths(const std::vector<std::string>& specs,
                                           const std::string& flag) {
  std::vector<std::string> out;
  for (const std::string& spec : specs) {
    GPIPE_CHECK(!spec.empty(), flag, ": an empty path");
    if (!is_pattern(spec) || fs::exists(spec)) {
      append_path(spec, flag, spec, out);
      continue;
    }
    const std::vector<std::string> matches = glob_matches(spec);
    GPIPE_CHECK(!matches.empty(), flag, "=", spec, ": the pattern matches no file");
    for (const std::string& m : matches) append_path(m, flag, spec, out);
  }
  return out;
}

std::vector<Document> read_documents(const std::string& path, const TextSourceOptions& options) {
  switch (source_format(path)) {
    case SourceFormat::kText:
      return read_text(path, options.doc_split);
    case SourceFormat::kJsonl:
      return read_jsonl(path, options.text_field);
    case SourceFormat::kShard:
      break;
  }
  throw Error(detail::concat("'", path, "' is an llm.c token shard: tokens, not documents"));
}

}  // namespace gpipe
