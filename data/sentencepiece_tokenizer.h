// SentencePieceTokenizer: a SentencePiece model file (".model", unigram or
// BPE, as spm_train or train_sentencepiece writes it) behind TextTokenizer,
// through the system libsentencepiece (//third_party:sentencepiece).
//
// Ids are the model's own: [0, GetPieceSize()), its unknown, BOS and EOS
// pieces included (SentencePiece's defaults: unk 0, bos 1, eos 2, no pad).
// encode adds no BOS / EOS; text the model cannot spell becomes the unknown
// id (unless the model has byte fallback). The end-of-text id is the model's
// EOS piece; a model trained without one (--eos_id=-1) is refused.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/text_tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace gpipe {

class SentencePieceTokenizer final : public TextTokenizer {
 public:
  // Reads the model at `path`. Throws gpipe::Error "tokenizer <path>: ..."
  // with the library's message for a missing or corrupt file, and for a
  // model without an EOS piece.
  static std::unique_ptr<SentencePieceTokenizer> load(const std::string& path);
  ~SentencePieceTokenizer() override;

  std::string name() const override { return path_; }
  int64_t vocab_size() const override;
  std::vector<int64_t> encode(std::string_view text) const override;
  // Control pieces (BOS, EOS, pad) render as nothing, the unknown piece as
  // U+2047; ids outside [0, vocab_size()) throw gpipe::Error.
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t eot_id() const override;
  int64_t unk_id() const;
  int64_t bos_id() const;  // -1 if the model has none
  int64_t pad_id() const;  // -1 if the model has none

 private:
  SentencePieceTokenizer(std::string path,
                         std::unique_ptr<sentencepiece::SentencePieceProcessor> model);
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> model_;
};

struct SentencePieceTrainOptions {
  std::vector<std::string> inputs;     // text files, one sentence per line
  std::string model_prefix;            // writes <prefix>.model and <prefix>.vocab
  int64_t vocab_size = 8000;           // pieces, unk / bos / eos included
  std::string model_type = "unigram";  // unigram | bpe
  double character_coverage = 0.9995;  // share of characters the pieces must spell, (0, 1]
  int threads = 1;
  int64_t max_sentences = 0;   // > 0: train on a sample of this many lines
  bool byte_fallback = false;  // unknown characters become byte pieces, not unk
  bool verbose = false;        // the library's progress log on stderr
};

// Trains a model with sentencepiece::SentencePieceTrainer and writes
// <prefix>.model / <prefix>.vocab. Throws gpipe::Error naming the bad option
// (no inputs, a missing input file, an unknown model type, a vocabulary too
// small or too large for the text, ...) or carrying the library's message.
void train_sentencepiece(const SentencePieceTrainOptions& options);

}  // namespace gpipe
