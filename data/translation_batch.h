// Batches of token ids for a sequence-to-sequence model, from a
// TranslationPair list and a ByteTokenizer.
//
// For pairs (source s, target t) in language l:
//   src     [B, S] = <l> s                PAD-padded
//   tgt_in  [B, T] = BOS t                PAD-padded   (decoder input)
//   tgt_out [B, T] = t EOS                PAD-padded   (what to predict)
// S and T are the longest row in the batch, capped at max_src_len /
// max_tgt_len; longer rows are truncated (tgt_out then lacks its EOS). All
// int64 on the CPU; PAD = 0, so a mask is `ids != 0`.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "data/batch.h"
#include "data/tokenizer.h"
#include "data/translation.h"

namespace gpipe {

struct TranslationBatch {
  Tensor src;      // [B, S] int64
  Tensor tgt_in;   // [B, T] int64
  Tensor tgt_out;  // [B, T] int64
};

struct TranslationBatchOptions {
  int64_t batch_size = 32;
  int64_t max_src_len = 66;  // cap on S, language tag included (<= 0: no cap)
  int64_t max_tgt_len = 65;  // cap on T, BOS / EOS included (<= 0: no cap)
  uint64_t seed = 0;         // epoch e is shuffled with mix_key(seed, e)
  bool shuffle = true;       // false: in order (evaluation)
  bool drop_last = true;     // true: every batch has exactly batch_size rows
};

// The batch of pairs[rows[0]], pairs[rows[1]], ... (rows non-empty).
// Throws gpipe::Error for an out-of-range row or a language the tokenizer lacks.
TranslationBatch make_translation_batch(const std::vector<TranslationPair>& pairs,
                                        const std::vector<int64_t>& rows,
                                        const ByteTokenizer& tokenizer,
                                        const TranslationBatchOptions& options);
// The batch of all of `pairs`, in order.
TranslationBatch make_translation_batch(const std::vector<TranslationPair>& pairs,
                                        const ByteTokenizer& tokenizer,
                                        const TranslationBatchOptions& options);

// A pair already in model ids: `src` as the encoder reads it (a language
// tag included, if any), `tgt` without BOS / EOS (data/seq2seq_vocab.h).
struct EncodedPair {
  std::vector<int64_t> src;
  std::vector<int64_t> tgt;
};

// The batch of pairs[rows[0]], ... laid out as above (rows non-empty).
// Throws gpipe::Error for an out-of-range row.
TranslationBatch make_translation_batch(const std::vector<EncodedPair>& pairs,
                                        const std::vector<int64_t>& rows,
                                        const TranslationBatchOptions& options);

// Batch{inputs = {src, tgt_in}, targets = {tgt_out}}.
Batch to_batch(const TranslationBatch& b);

// Endless epoch iterator, as ImageBatcher: next() moves to a new, reshuffled
// epoch when one is used up. The pairs are shared (read-only) between copies.
class TranslationBatcher {
 public:
  TranslationBatcher(std::vector<TranslationPair> pairs, ByteTokenizer tokenizer,
                     TranslationBatchOptions options);

  TranslationBatch next();
  int64_t batches_per_epoch() const { return sampler_.batches_per_epoch(); }
  int64_t epoch() const { return sampler_.epoch(); }  // epoch of the next batch
  const std::vector<TranslationPair>& pairs() const { return *pairs_; }
  const ByteTokenizer& tokenizer() const { return tokenizer_; }

 private:
  std::shared_ptr<const std::vector<TranslationPair>> pairs_;
  ByteTokenizer tokenizer_;
  TranslationBatchOptions options_;
  EpochSampler sampler_;
};

// Adapter for PrefetchLoader: to_batch of the batcher's batches for `epochs`
// epochs, then std::nullopt (epochs <= 0: endless).
BatchProducer translation_batch_producer(TranslationBatcher batcher, int64_t epochs = 0);

}  // namespace gpipe
