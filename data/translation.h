// A many-to-English translation corpus from the iso-codes gettext catalogs
// (/usr/share/locale/<lang>/LC_MESSAGES/iso_*.mo): names of languages,
// countries, subdivisions, currencies and scripts, each pair
// (translated name in <lang>) -> (English msgid). This mirrors the GPipe
// paper's one-model-many-languages-into-English setting: the source carries a
// tag of its language (ByteTokenizer::encode_with_tag -> "<fr> allemand").
//
// The train/test split is by the English side: a pair is held out iff a hash
// of its English string (and the seed) falls below test_fraction, so one
// English name is either in test for every language or in train for every
// language, and no test target is ever seen in training.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace gpipe {

inline constexpr const char* kLocaleDir = "/usr/share/locale";

// fr de es it nl pl pt ru sv uk: ten languages with large iso-codes
// catalogs in Debian 12 (iso-codes 4.15), Latin and Cyrillic scripts.
std::vector<std::string> default_translation_languages();
// The distinct iso-codes catalogs (the iso_639.mo-style names are symlinks):
// iso_639-3, iso_639-2, iso_639-5, iso_3166-1, iso_3166-2, iso_3166-3,
// iso_4217, iso_15924.
std::vector<std::string> default_iso_catalogs();

struct TranslationPair {
  std::string source;    // the name in `language` (no tag)
  std::string target;    // the English msgid
  std::string language;  // locale directory name: "fr", "pt_BR", ...
};

struct TranslationCorpusOptions {
  std::string locale_dir = kLocaleDir;
  std::vector<std::string> languages = default_translation_languages();
  std::vector<std::string> catalogs = default_iso_catalogs();
  // Drop pairs whose source or target is longer than this many bytes (<= 0: keep all).
  int64_t max_bytes = 64;
  bool drop_identical = true;  // drop pairs whose translation equals the English
  double test_fraction = 0.1;  // share of English strings held out, in [0, 1]
  uint64_t split_seed = 0;
};

struct TranslationCorpus {
  std::vector<std::string> languages;  // = options.languages, the tokenizer's tags
  std::vector<TranslationPair> train;
  std::vector<TranslationPair> test;
  ByteTokenizer tokenizer() const { return ByteTokenizer(languages); }
};

// Loads every catalog of every language, drops empty, identical (if asked),
// too long and duplicate pairs, and splits by English string. Order is
// deterministic: languages, then catalogs as listed, then msgid order. A
// catalog missing for one language is skipped (not every language has all);
// a language with none of the catalogs throws gpipe::Error naming the
// directory searched, as does a corrupt catalog (naming the file).
TranslationCorpus load_translation_corpus(const TranslationCorpusOptions& options = {});

// True iff pairs with English side `english` belong to the test split.
bool in_test_split(std::string_view english, double test_fraction, uint64_t seed);

}  // namespace gpipe
