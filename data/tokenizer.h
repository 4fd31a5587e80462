// ByteTokenizer: the vocabulary of the translation models.
//
// Ids: 0 = PAD, 1 = BOS, 2 = EOS, 3 = UNK, then one tag per language
// ("<fr>", "<de>", ... in the order given), then the 256 byte values. Byte
// level rather than a learned BPE: every UTF-8 string (indeed every byte
// string) encodes with no unknown tokens and decodes back exactly, the
// vocabulary is tiny and fixed, and the names in the iso-codes corpus are
// short (a median of ~12 bytes), so the longer sequences cost little.
// UNK is reserved for vocabulary compatibility; encode never produces it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpipe {

class ByteTokenizer {
 public:
  static constexpr int64_t kPad = 0;
  static constexpr int64_t kBos = 1;
  static constexpr int64_t kEos = 2;
  static constexpr int64_t kUnk = 3;
  static constexpr int64_t kNumSpecial = 4;

  // `languages` become tag tokens kNumSpecial + i; duplicates or empty
  // names throw gpipe::Error.
  explicit ByteTokenizer(std::vector<std::string> languages = {});

  int64_t vocab_size() const { return byte_base() + 256; }
  const std::vector<std::string>& languages() const { return languages_; }
  // Id of the tag of `language`; throws gpipe::Error naming it if unknown.
  int64_t language_id(std::string_view language) const;
  int64_t byte_id(uint8_t byte) const { return byte_base() + byte; }
  bool is_byte(int64_t id) const { return id >= byte_base() && id < vocab_size(); }
  bool is_language_tag(int64_t id) const { return id >= kNumSpecial && id < byte_base(); }

  // One id per byte of `text`, no BOS/EOS.
  std::vector<int64_t> encode(std::string_view text) const;
  // The tag of `language` followed by encode(text): a model input "<fr> français".
  std::vector<int64_t> encode_with_tag(std::string_view language, std::string_view text) const;
  // The bytes of the byte ids; stops at the first EOS; skips PAD and BOS;
  // language tags render as "<xx>" and UNK as U+FFFD. Ids outside the
  // vocabulary throw gpipe::Error. decode(encode(s)) == s for every s.
  std::string decode(const std::vector<int64_t>& ids) const;
  // Readable name of one id ("<pad>", "<fr>", "a", "\xc3").
  std::string token_name(int64_t id) const;

 private:
  int64_t byte_base() const { return kNumSpecial + static_cast<int64_t>(languages_.size()); }
  std::vector<std::string> languages_;
};

}  // namespace gpipe
