// The split patterns as hand-written matchers. Each regex is an alternation
// tried left to right at the current position; the first alternative that
// matches wins and the next match starts where it ended. Because every code
// point is a letter, a number, whitespace or "other", some alternative always
// matches, so the pieces cover the text. The only backtracking the patterns
// need is in the whitespace alternatives, worked out here once:
//
//  * \s+(?!\S): a run of whitespace up to the end of the text matches whole;
//    a run of n >= 2 followed by a non-space gives up its last character
//    (which then leads the next piece, " word"); a single one fails.
//  * \s*[\r\n]+ (Llama 3): the run up to and including its last \r or \n.
//
// Note [Invalid UTF-8]. The reference (the Rust `tokenizers` package) takes
// Rust strings, and Python str input is always valid Unicode there (lone
// surrogates are refused when the str is converted), so it never sees
// invalid UTF-8. gpipe reads raw files, so a byte that does not start a
// well-formed sequence (a stray continuation byte, a truncated or overlong
// sequence, an encoded surrogate, a value above U+10FFFF) counts as one code
// point of class "other" by itself, and decoding resumes at the next byte.
// Byte-level BPE maps it to its own byte token, so such text still encodes,
// and decodes back byte for byte.
#include "data/pretokenize.h"

#include <algorithm>
#include <array>

namespace gpipe::bpe {
namespace {

struct CodeRange {
  uint32_t first;
  uint32_t last;
};

#include "data/unicode_tables.inc"

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

template <size_t N>
bool in_ranges(const CodeRange (&ranges)[N], uint32_t cp) {
  const auto* it = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                                    [](uint32_t c, const CodeRange& r) { return c < r.first; });
  return it != std::begin(ranges) && cp <= (it - 1)->last;
}

bool is_white_space(uint32_t cp) {
  return (cp >= 0x9 && cp <= 0xD) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

CodeClass classify(uint32_t cp) {
  if (is_white_space(cp)) return CodeClass::kSpace;
  if (in_ranges(kLetterRanges, cp)) return CodeClass::kLetter;
  if (in_ranges(kNumberRanges, cp)) return CodeClass::kNumber;
  return CodeClass::kOther;
}

// The Basic Multilingual Plane, classified once (64 KiB); the rest searches.
const std::array<CodeClass, 0x10000>& bmp_classes() {
  static const auto* table = [] {
    auto* t = new std::array<CodeClass, 0x10000>;
    for (uint32_t cp = 0; cp < 0x10000; ++cp) (*t)[cp] = classify(cp);
    return t;
  }();
  return *table;
}

// A code point of the text: its value (for an invalid byte, the byte plus
// 0x110000, which no pattern names), class and byte offset.
struct Code {
  uint32_t cp;
  CodeClass cls;
  uint32_t offset;
};

constexpr uint32_t kInvalid = 0x110000;

// Decodes one code point at s[i]; returns its length in bytes (1 for an
// invalid byte, Note [Invalid UTF-8]).
size_t decode_one(std::string_view s, size_t i, uint32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = b(i);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  size_t len = 0;
  uint32_t min = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, min = 0x80, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, min = 0x800, cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, min = 0x10000, cp = b0 & 0x07;
  }
  if (len == 0 || i + len > s.size()) {
    cp = kInvalid + b0;
    return 1;
  }
  for (size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) {
      cp = kInvalid + b0;
      return 1;
    }
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    cp = kInvalid + b0;
    return 1;
  }
  return len;
}

void decode_all(std::string_view s, std::vector<Code>& out) {
  const auto& bmp = bmp_classes();
  out.clear();
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t len = decode_one(s, i, cp);
    const CodeClass cls = cp < 0x10000 ? bmp[cp] : cp < kInvalid ? classify(cp) : CodeClass::kOther;
    out.push_back(Code{cp, cls, static_cast<uint32_t>(i)});
    i += len;
  }
}

class Matcher {
 public:
  explicit Matcher(const std::vector<Code>& c) : c_(c), n_(c.size()) {}

  size_t gpt2(size_t i) const {
    if (const size_t e = contraction(i, /*fold_case=*/false)) return e;
    // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': a space joins the run after it.
    size_t j = i;
    if (cp(i) == ' ' && i + 1 < n_ && cls(i + 1) != CodeClass::kSpace) j = i + 1;
    if (cls(j) != CodeClass::kSpace) return run(j, cls(j));
    return space_tail(i);
  }

  size_t llama3(size_t i) const {
    if (const size_t e = contraction(i, /*fold_case=*/true)) return e;
    const CodeClass k = cls(i);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (k != CodeClass::kLetter && k != CodeClass::kNumber && !newline(i) && i + 1 < n_ &&
        cls(i + 1) == CodeClass::kLetter)
      return run(i + 1, CodeClass::kLetter);
    if (k == CodeClass::kLetter) return run(i, k);
    // \p{N}{1,3}
    if (k == CodeClass::kNumber) {
      size_t j = i + 1;
      while (j < n_ && j < i + 3 && cls(j) == CodeClass::kNumber) ++j;
      return j;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    size_t j = i;
    if (cp(i) == ' ' && i + 1 < n_ && cls(i + 1) == CodeClass::kOther) j = i + 1;
    if (cls(j) == CodeClass::kOther) {
      j = run(j, CodeClass::kOther);
      while (j < n_ && newline(j)) ++j;
      return j;
    }
    // \s*[\r\n]+
    const size_t e = run(i, CodeClass::kSpace);
    for (size_t k2 = e; k2 > i; --k2)
      if (newline(k2 - 1)) return k2;
    return space_tail(i);
  }

 private:
  uint32_t cp(size_t i) const { return c_[i].cp; }
  CodeClass cls(size_t i) const { return c_[i].cls; }
  bool newline(size_t i) const { return cp(i) == '\r' || cp(i) == '\n'; }

  size_t run(size_t i, CodeClass k) const {
    while (i < n_ && cls(i) == k) ++i;
    return i;
  }

  // \s+(?!\S)|\s+ at whitespace i.
  size_t space_tail(size_t i) const {
    const size_t e = run(i, CodeClass::kSpace);
    if (e == n_ || e - i == 1) return e;
    return e - 1;
  }

  // 's|'t|'re|'ve|'m|'ll|'d, case-folded for Llama 3's (?i:...): ASCII
  // letters, and U+017F (long s), whose case folding is 's'.
  size_t contraction(size_t i, bool fold_case) const {
    if (cp(i) != '\'' || i + 1 >= n_) return 0;
    const auto letter = [&](size_t k) -> uint32_t {
      const uint32_t c = cp(k);
      if (!fold_case) return c;
      if (c >= 'A' && c <= 'Z') return c + ('a' - 'A');
      return c == 0x17F ? 's' : c;
    };
    const uint32_t x = letter(i + 1);
    if (x == 's' || x == 't' || x == 'm' || x == 'd') return i + 2;
    if (i + 2 >= n_) return 0;
    const uint32_t y = letter(i + 2);
    if ((x == 'r' && y == 'e') || (x == 'v' && y == 'e') || (x == 'l' && y == 'l')) return i + 3;
    return 0;
  }

  const std::vector<Code>& c_;
  size_t n_;
};

}  // namespace

CodeClass code_class(uint32_t cp) {
  if (cp < 0x10000) return bmp_classes()[cp];
  return cp <= 0x10FFFF ? classify(cp) : CodeClass::kOther;
}

const char* unicode_version() { return kUnicodeVersion; }

std::string_view split_pattern_regex(SplitPattern pattern) {
  return pattern == SplitPattern::kGpt2 ? kGpt2Regex : kLlama3Regex;
}

std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex) {
  if (regex == kGpt2Regex) return SplitPattern::kGpt2;
  if (regex == kLlama3Regex) return SplitPattern::kLlama3;
  return std::nullopt;
}

void split(std::string_view text, SplitPattern pattern, std::vector<std::string_view>& pieces) {
  thread_local std::vector<Code> codes;
  decode_all(text, codes);
  pieces.clear();
  const Matcher m(codes);
  const auto offset = [&](size_t i) { return i < codes.size() ? codes[i].offset : text.size(); };
  for (size_t i = 0; i < codes.size();) {
    const size_t e = pattern == SplitPattern::kGpt2 ? m.gpt2(i) : m.llama3(i);
    pieces.push_back(text.substr(offset(i), offset(e) - offset(i)));
    i = e;
  }
}

}  // namespace gpipe::bpe
