// Language-model data from documents: read, split, tokenise and pack.
//
//   read_fortunes(dir)     the default corpus: every fortune file of Debian's
//                          `fortunes` package, documents separated by "%" lines
//   split_documents(...)   a deterministic held-out share, by document
//   pack(...)              documents tokenised and concatenated with the
//                          end-of-text id between, cut into rows of T + 1
//                          tokens (stride T): inputs are a row's first T
//                          tokens, targets its last T (the next tokens)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/text_tokenizer.h"

namespace gpipe {

inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

struct Document {
  std::string source;  // "file:line" of its first line
  std::string text;
};

// Every regular file of `dir` without an extension (the .dat index and the
// .u8 links are skipped), in name order, split at lines that are "%".
// Throws gpipe::Error naming the directory if it is missing or holds no document.
std::vector<Document> read_fortunes(const std::string& dir);

// Document i goes to the held-out side when its hash (of the index and
// `seed`) falls in the `held_out` fraction; at least one each side when
// there are two or more documents.
void split_documents(const std::vector<Document>& docs, double held_out, uint64_t seed,
                     std::vector<Document>& train, std::vector<Document>& val);

// The token stream of `docs` (each followed by the end-of-text id), cut into
// rows of `context` + 1 tokens; the tail that fills no row is dropped.
struct PackedRows {
  std::vector<int32_t> tokens;  // rows x (context + 1), row-major
  int64_t rows = 0, context = 0;
  int64_t documents = 0, text_bytes = 0, stream_tokens = 0;
  // Each document's first token in the stream (row r starts at r * context)
  // and its Document::source.
  std::vector<int64_t> doc_starts;
  std::vector<std::string> sources;
};
PackedRows pack(const std::vector<Document>& docs, const TextTokenizer& tok, int64_t context);

// Where row `row`'s first token comes from: "<file>:<line>", the source of
// the document holding it with the line advanced by the newlines of that
// document's tokens before it (decoded by `tok`, the tokenizer that packed
// `p`); a source not of the form "<file>:<line>" gets " +<n> tokens". Empty
// when `p` has no sources. Throws gpipe::Error for a row outside [0, rows).
std::string row_source(const PackedRows& p, const TextTokenizer& tok, int64_t row);

// Inputs [n, T] and targets [n, T] (int64) of the given rows.
Tensor lm_inputs(const PackedRows& p, const std::vector<int64_t>& rows);
Tensor lm_targets(const PackedRows& p, const std::vector<int64_t>& rows);

}  // namespace gpipe
