// TextTokenizer: what a language model's data path asks of a tokenizer
// (Note [Tokenizer interface] in data/text_tokenizer.cc). Every tokenizer
// (bytes, a Hugging Face byte-level BPE, and a SentencePiece model behind
// the same interface) turns text into ids below vocab_size() and back,
// and names the end-of-text id that separates packed documents.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gpipe {

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  // "bytes", or the file a tokenizer was read from: what checkpoints record.
  virtual std::string name() const = 0;
  virtual int64_t vocab_size() const = 0;
  // Ids in [0, vocab_size()), no special tokens added.
  virtual std::vector<int64_t> encode(std::string_view text) const = 0;
  // The text of `ids`; the end-of-text id renders as nothing. Throws
  // gpipe::Error for an id outside the vocabulary.
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  // The id packed between documents (GPT-2's <|endoftext|>).
  virtual int64_t eot_id() const = 0;
};

// Byte-level: ids 0..255 are the bytes, 256 is end-of-text (vocabulary 257).
// Every byte string encodes and decodes back exactly.
class BytesTokenizer final : public TextTokenizer {
 public:
  std::string name() const override { return "bytes"; }
  int64_t vocab_size() const override { return 257; }
  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t eot_id() const override { return 256; }
};

// `spec`: "bytes", the path of a Hugging Face tokenizer.json (ending in
// ".json") holding a byte-level BPE (data/bpe_tokenizer.h), or the path of a
// SentencePiece model (ending in ".model", data/sentencepiece_tokenizer.h). Throws
// gpipe::Error naming the spec and the known ones, or naming the file and
// what is wrong with it.
std::unique_ptr<TextTokenizer> make_text_tokenizer(const std::string& spec);

}  // namespace gpipe
