// Corpus assembly from the iso-codes catalogs, and the split by English string.
#include "data/translation.h"

#include <filesystem>
#include <unordered_set>

#include "core/error.h"
#include "core/rng.h"
#include "data/mo_file.h"

namespace gpipe {

std::vector<std::string> default_translation_languages() {
  return {"fr", "de", "es", "it", "nl", "pl", "pt", "ru", "sv", "uk"};
}

std::vector<std::string> default_iso_catalogs() {
  return {"iso_639-3",  "iso_639-2",  "iso_639-5", "iso_3166-1",
          "iso_3166-2", "iso_3166-3", "iso_4217",  "iso_15924"};
}

bool in_test_split(std::string_view english, double test_fraction, uint64_t seed) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a, then mixed with the seed
  for (char c : english) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  const double u = static_cast<double>(mix_key(seed, h) >> 11) * 0x1.0p-53;  // uniform in [0, 1)
  return u < test_fraction;
}

TranslationCorpus load_translation_corpus(const TranslationCorpusOptions& options) {
  GPIPE_CHECK(options.test_fraction >= 0.0 && options.test_fraction <= 1.0,
              "load_translation_corpus: test_fraction must be in [0, 1], got ",
              options.test_fraction);
  GPIPE_CHECK(!options.languages.empty(), "load_translation_corpus: no languages given");
  TranslationCorpus corpus;
  corpus.languages = options.languages;
  static_cast<void>(ByteTokenizer(options.languages));  // rejects duplicate or empty language names

  std::unordered_set<std::string> seen;
  for (const std::string& lang : options.languages) {
    const std::filesystem::path dir =
        std::filesystem::path(options.locale_dir) / lang / "LC_MESSAGES";
    int found = 0;
    for (const std::string& catalog : options.catalogs) {
      const std::filesystem::path path = dir / (catalog + ".mo");
      std::error_code ec;
      if (!std::filesystem::exists(path, ec)) continue;
      ++found;
      for (MoEntry& e : read_mo_file(path.string()).entries) {
        if (e.translation.empty()) continue;
        if (options.drop_identical && e.translation == e.original) continue;
        if (options.max_bytes > 0 &&
            (static_cast<int64_t>(e.translation.size()) > options.max_bytes ||
             static_cast<int64_t>(e.original.size()) > options.max_bytes))
          continue;
        if (!seen.insert(lang + '\0' + e.translation + '\0' + e.original).second) continue;
        auto& split = in_test_split(e.original, options.test_fraction, options.split_seed)
                          ? corpus.test
                          : corpus.train;
        split.push_back(TranslationPair{std::move(e.translation), std::move(e.original), lang});
      }
    }
    GPIPE_CHECK(found > 0, "load_translation_corpus: no iso-codes catalog for language \"", lang,
                "\" in ", dir.string(), " (looked for ", options.catalogs.size(),
                " catalogs such as iso_639-3.mo; install the iso-codes package)");
  }
  return corpus;
}

}  // namespace gpipe
