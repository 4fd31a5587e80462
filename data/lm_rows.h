// LmRows: a language model's rows of context + 1 tokens, drawn from token
// streams that are either in memory (documents packed by pack(),
// data/lm_corpus.h) or spans of mapped llm.c shards (data/token_shard.h),
// never copied whole. Each stream is cut into windows of context + 1 tokens
// at stride context (the tail that fills no row is dropped); row r is the
// r-th window over the streams in the order they were added.
//
//   LmRows rows(128);
//   rows.add_packed(pack(docs, tok, 128));
//   rows.add_shard(shard, 0, shard->size());
//   Tensor x = rows.inputs({0, 5}), y = rows.targets({0, 5});   // [2, 128] int64
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/lm_corpus.h"
#include "data/token_shard.h"

namespace gpipe {

class LmRows {
 public:
  explicit LmRows(int64_t context);

  // The packed rows of text (p.context must equal this context).
  void add_packed(PackedRows p);
  // Tokens [begin, end) of `shard` as one stream.
  void add_shard(std::shared_ptr<const TokenShard> shard, int64_t begin, int64_t end);

  int64_t rows() const { return total_; }
  int64_t context() const { return context_; }
  int64_t stream_tokens() const;  // tokens over every stream (tails included)

  // Row r's context + 1 tokens into `out`. Throws gpipe::Error for r outside [0, rows()).
  void row(int64_t r, int64_t* out) const;
  // Where row r's first token comes from: "<file>:<line>" for packed text
  // (row_source in data/lm_corpus.h; `tok` is the tokenizer that packed it),
  // "<shard file> token <offset>" for a shard. Throws gpipe::Error for r
  // outside [0, rows()).
  std::string source(int64_t r, const TextTokenizer& tok) const;
  // Inputs [n, T] (each row's first T tokens) and targets [n, T] (its last
  // T: the next tokens), int64.
  Tensor inputs(const std::vector<int64_t>& rows) const;
  Tensor targets(const std::vector<int64_t>& rows) const;

 private:
  struct Stream {
    PackedRows packed;                        // in memory, or
    std::shared_ptr<const TokenShard> shard;  // a span of a shard
    int64_t begin = 0, tokens = 0;
    int64_t first_row = 0, rows = 0;
  };
  Tensor slice(const std::vector<int64_t>& rows, int64_t skip) const;
  int64_t context_;
  int64_t total_ = 0;
  std::vector<Stream> streams_;
};

// Where a shard of `n` tokens is cut to hold out about `fraction` of it:
// the last end-of-text token at or before (1 - fraction) n, so the held-out
// side starts with a document, or (1 - fraction) n itself when the shard
// has no `eot` in the half before that point. 0 < fraction < 1.
int64_t shard_split_point(const TokenShard& shard, double fraction, int64_t eot);

}  // namespace gpipe
