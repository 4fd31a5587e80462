// Byte-level tokenizer: a fixed table, so encode/decode are plain loops.
#include "data/tokenizer.h"

#include <algorithm>

#include "core/error.h"

namespace gpipe {

ByteTokenizer::ByteTokenizer(std::vector<std::string> languages)
    : languages_(std::move(languages)) {
  for (size_t i = 0; i < languages_.size(); ++i) {
    GPIPE_CHECK(!languages_[i].empty(), "ByteTokenizer: language ", i, " has an empty name");
    for (size_t j = 0; j < i; ++j)
      GPIPE_CHECK(languages_[j] != languages_[i], "ByteTokenizer: language \"", languages_[i],
                  "\" listed twice");
  }
}

int64_t ByteTokenizer::language_id(std::string_view language) const {
  auto it = std::find(languages_.begin(), languages_.end(), language);
  GPIPE_CHECK(it != languages_.end(), "ByteTokenizer: unknown language \"", language,
              "\" (the vocabulary has ", languages_.size(), " language tags)");
  return kNumSpecial + (it - languages_.begin());
}

std::vector<int64_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(byte_id(static_cast<uint8_t>(c)));
  return ids;
}

std::vector<int64_t> ByteTokenizer::encode_with_tag(std::string_view language,
                                                    std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size() + 1);
  ids.push_back(language_id(language));
  for (char c : text) ids.push_back(byte_id(static_cast<uint8_t>(c)));
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (int64_t id : ids) {
    GPIPE_CHECK(id >= 0 && id < vocab_size(), "ByteTokenizer::decode: id ", id,
                " outside the vocabulary [0, ", vocab_size(), ")");
    if (id == kEos) break;
    if (id == kPad || id == kBos) continue;
    if (id == kUnk) {
      out += "\xEF\xBF\xBD";
    } else if (is_language_tag(id)) {
      out += "<" + languages_[static_cast<size_t>(id - kNumSpecial)] + ">";
    } else {
      out += static_cast<char>(id - byte_base());
    }
  }
  return out;
}

std::string ByteTokenizer::token_name(int64_t id) const {
  GPIPE_CHECK(id >= 0 && id < vocab_size(), "ByteTokenizer::token_name: id ", id,
              " outside the vocabulary [0, ", vocab_size(), ")");
  switch (id) {
    case kPad:
      return "<pad>";
    case kBos:
      return "<bos>";
    case kEos:
      return "<eos>";
    case kUnk:
      return "<unk>";
    default:
      break;
  }
  if (is_language_tag(id)) return "<" + languages_[static_cast<size_t>(id - kNumSpecial)] + ">";
  const auto byte = static_cast<unsigned>(id - byte_base());
  if (byte >= 0x20 && byte < 0x7f) return std::string(1, static_cast<char>(byte));
  static const char* digits = "0123456789abcdef";
  return std::string("\\x") + digits[byte >> 4] + digits[byte & 0xf];
}

}  // namespace gpipe
