// A language model's own data: what --data=PATH... names, expanded into
// files, and the readers of each format (Note [Text sources] in
// data/text_source.cc).
//
//   .txt    text: one document per file, or split at blank lines
//   .jsonl  one JSON object per line; its --text-field string is a document
//   .bin    an llm.c token shard, already tokenised (data/token_shard.h)
//
//   for (const std::string& f : expand_data_paths({"corpus/", "extra/*.txt"}, "--data"))
//     if (source_format(f) != SourceFormat::kShard) append(read_documents(f, options));
#pragma once

#include <string>
#include <vector>

#include "data/lm_corpus.h"

namespace gpipe {

enum class SourceFormat { kText, kJsonl, kShard };

// "text (.txt), JSON lines (.jsonl), llm.c token shards (.bin)": what an
// unknown extension's message lists.
const char* known_source_formats();

// The format of `path` by its extension. Throws gpipe::Error naming the
// file and the known formats for any other.
SourceFormat source_format(const std::string& path);

// Each spec in order: a file as it is; a folder's files, recursively, in
// name order (names starting with '.' skipped); a pattern with *, ? or [
// expanded by glob(3), in name order, folders among the matches expanded as
// above. Every file must have a known extension. Throws gpipe::Error naming
// `flag` and the spec when it names nothing (missing path, a pattern without
// matches, an empty folder) or a file of an unknown format.
std::vector<std::string> expand_data_paths(const std::vector<std::string>& specs,
                                           const std::string& flag);

struct TextSourceOptions {
  std::string doc_split = "file";   // .txt: "file" (one document) | "blank" (blank lines end one)
  std::string text_field = "text";  // .jsonl: the key of a record's text
};

// The documents of one .txt or .jsonl file, each with its "file:line"
// source; blank documents are skipped. Throws gpipe::Error naming the file
// (and line, for .jsonl: malformed JSON, not an object, a missing or
// non-string text field) or an unknown doc_split.
std::vector<Document> read_documents(const std::string& path, const TextSourceOptions& options);

}  // namespace gpipe
