// Seq2SeqVocab: the vocabulary of a sequence-to-sequence model over any
// TextTokenizer(s), one shared by source and target or one per side.
//
// Ids 0..3 are ByteTokenizer's PAD, BOS, EOS and UNK (so batches, losses and
// greedy decoding treat them alike); a tokenizer's id i is model id 4 + i.
// The model's vocabulary is 4 + the larger tokenizer's. The tokenizers' own
// special pieces (an end-of-text id, SentencePiece's bos / eos) stay ordinary
// ids: the model's sequences are delimited by BOS / EOS above.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/text_tokenizer.h"
#include "data/tokenizer.h"

namespace gpipe {

class Seq2SeqVocab {
 public:
  static constexpr int64_t kOffset = ByteTokenizer::kNumSpecial;

  Seq2SeqVocab(std::shared_ptr<const TextTokenizer> source,
               std::shared_ptr<const TextTokenizer> target);

  int64_t vocab_size() const;
  const TextTokenizer& source() const { return *source_; }
  const TextTokenizer& target() const { return *target_; }
  // Model ids of `text` (no BOS / EOS).
  std::vector<int64_t> encode_source(std::string_view text) const;
  std::vector<int64_t> encode_target(std::string_view text) const;
  // The text of a generated target: stops at the first EOS, skips PAD, BOS
  // and UNK, and ids past the target tokenizer's vocabulary (a model whose
  // vocabulary is sized for a larger source tokenizer may emit them).
  std::string decode_target(const std::vector<int64_t>& ids) const;
  // "bytes (257 ids)" or "source X (n ids), target Y (m ids)".
  std::string describe() const;

 private:
  std::shared_ptr<const TextTokenizer> source_, target_;
};

}  // namespace gpipe
