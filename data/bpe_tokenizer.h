// BpeTokenizer: a Hugging Face tokenizer.json with a byte-level BPE model
// (GPT-2's and Llama 3's kind), behind TextTokenizer. Note [Byte-level BPE]
// in data/bpe_tokenizer.cc says how text becomes ids.
//
// What a file may hold (anything else is refused by name):
//  * model: type "BPE", `vocab` (token -> id), `merges` ("a b" strings or
//    [a, b] pairs, rank = position), optional `unk_token`, `fuse_unk`,
//    `ignore_merges`; no dropout, subword prefix/suffix or byte fallback.
//  * normalizer: null.
//  * pre_tokenizer: ByteLevel (add_prefix_space, use_regex: GPT-2's split
//    pattern), or a Sequence of a Split (GPT-2's or Llama 3's regex,
//    behavior "Isolated", not inverted) and a ByteLevel.
//  * decoder: ByteLevel. post_processor: ignored (encode adds no tokens).
//  * added_tokens: matched whole in the input before pre-tokenisation,
//    leftmost and then longest first (their lstrip / rstrip / single_word
//    options are not applied).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/bpe_tables.h"
#include "data/pretokenize.h"
#include "data/text_tokenizer.h"

namespace gpipe {

class BpeTokenizer final : public TextTokenizer {
 public:
  // Reads the tokenizer.json at `path`. Throws gpipe::Error
  // "tokenizer <path>: <what is wrong>" for a missing file, bad JSON, a
  // missing or malformed field, a merge naming an unknown token, an
  // unsupported model, normalizer, pre-tokenizer or decoder, or a file with
  // no end-of-text token.
  static std::unique_ptr<BpeTokenizer> load(const std::string& path);
  // The same from the file's text; `name` stands for the file in messages.
  static std::unique_ptr<BpeTokenizer> from_json(std::string_view json, const std::string& name);

  std::string name() const override { return name_; }
  // The largest id (vocabulary or added token) plus one.
  int64_t vocab_size() const override { return static_cast<int64_t>(token_bytes_.size()); }
  // Never throws on content; invalid UTF-8 encodes byte by byte.
  std::vector<int64_t> encode(std::string_view text) const override;
  // Special added tokens and the end-of-text token render as nothing, as in
  // the reference's decode(skip_special_tokens=True); other tokens as their
  // bytes, invalid UTF-8 included (the reference replaces it with U+FFFD). Throws gpipe::Error for
  // an id outside [0, vocab_size()) or one no token has.
  std::string decode(const std::vector<int64_t>& ids) const override;
  // "<|endoftext|>", else "<|end_of_text|>", else "<|eot_id|>", else the first
  // special added token.
  int64_t eot_id() const override { return eot_id_; }

  // The id of a vocabulary or added token, or -1.
  int64_t token_id(std::string_view token) const;

  struct AddedToken {
    std::string content;
    int32_t id = 0;
    bool special = false;
  };

 private:
  friend class BpeFileReader;  // fills the tables (data/bpe_tokenizer_load.cc)
  BpeTokenizer() = default;

  void encode_segment(std::string_view segment, std::vector<int64_t>& ids) const;
  void encode_piece(std::string_view piece, std::vector<int64_t>& ids) const;
  void merge_piece(std::string_view piece, std::vector<int32_t>& out) const;
  static constexpr size_t kShortPiece = 32;  // symbols; Note [Short merges]
  void merge_short(std::vector<int32_t>& ids) const;
  void merge_long(std::vector<int32_t>& ids) const;

  std::string name_;
  // Per id: its text as raw bytes (Note [Byte-level BPE]), whether it is a
  // special added token, whether any token has it.
  std::vector<std::string> token_bytes_;
  std::vector<uint8_t> special_;
  std::vector<uint8_t> assigned_;
  std::unordered_map<std::string, int32_t> token_ids_;  // token as written -> id
  bpe::TokenTable bytes_ids_;                           // raw bytes -> id (byte-level tokens)
  std::array<int32_t, 256> byte_ids_{};                 // a lone byte's token, or -1
  bpe::MergeTable merges_;
  std::vector<AddedToken> added_;
  std::array<std::vector<int32_t>, 256> added_by_first_byte_;  // indexes into added_
  int64_t eot_id_ = -1;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  bool has_split_ = false;
  bpe::SplitPattern split_ = bpe::SplitPattern::kGpt2;
  bool add_prefix_space_ = false;
  bool byte_level_regex_ = false;

  mutable bpe::PieceCache cache_;  // Note [BPE cache]
};

}  // namespace gpipe
