// The user's own translation data: tab-separated files, one pair a line,
//
//   source text<TAB>target text
//
// UTF-8 (or any bytes) without tabs or newlines inside a field. A line may
// end in "\r\n"; empty lines are skipped. Anything else (no tab, more than
// one, an empty side) is refused with "<file>:<line>: ..." saying what was
// expected. Pairs have no language (TranslationPair::language is empty),
// so a model's source carries no tag.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "data/translation.h"

namespace gpipe {

// The pairs of `text`, in order; `name` is the file named in errors.
std::vector<TranslationPair> parse_translation_tsv(std::string_view text, const std::string& name);

// The pairs of the file at `path`. Throws gpipe::Error naming the file when
// it cannot be read or holds no pair, and file:line for a malformed line.
std::vector<TranslationPair> read_translation_tsv(const std::string& path);

}  // namespace gpipe
