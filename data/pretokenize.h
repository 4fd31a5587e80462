// Pre-tokenisation for byte-level BPE (data/bpe_tokenizer.h): the split
// patterns GPT-2 and Llama 3 write as regular expressions, matched by hand
// over Unicode code points, and the character classes they use.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace gpipe::bpe {

// \p{L} (Lu Ll Lt Lm Lo), \p{N} (Nd Nl No), \s (the White_Space property), or
// none of them. The tables are Unicode unicode_version() (16.0.0), the
// version of the Python `tokenizers` package's regex engine.
enum class CodeClass : uint8_t { kOther, kLetter, kNumber, kSpace };
CodeClass code_class(uint32_t cp);
const char* unicode_version();

enum class SplitPattern {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
};
// The regex source of `pattern`, as tokenizer.json files spell it.
std::string_view split_pattern_regex(SplitPattern pattern);
// The pattern whose regex source is exactly `regex`, or nullopt.
std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex);

// Cuts `text` into the consecutive matches of `pattern`, which cover it
// exactly, and replaces `pieces` with them (views into `text`; none empty).
// Never throws on content: a byte that does not start well-formed UTF-8 is
// a code point of its own, of class kOther (Note [Invalid UTF-8] in
// data/pretokenize.cc).
void split(std::string_view text, SplitPattern pattern, std::vector<std::string_view>& pieces);

}  // namespace gpipe::bpe
