#include "data/translation.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

#include "data/translation_batch.h"
#include "tests/test_util.h"

using namespace gpipe;
using Catch::Matchers::Contains;

namespace {

bool has_pair(const std::vector<TranslationPair>& pairs, const std::string& src,
              const std::string& tgt, const std::string& lang) {
  return std::any_of(pairs.begin(), pairs.end(), [&](const TranslationPair& p) {
    return p.source == src && p.target == tgt && p.language == lang;
  });
}

std::vector<int64_t> row(const Tensor& t, int64_t r) {
  std::vector<int64_t> all = t.to_vector<int64_t>();
  const int64_t w = t.size(1);
  return std::vector<int64_t>(all.begin() + r * w, all.begin() + (r + 1) * w);
}

}  // namespace

TEST_CASE("Translation corpus: default languages, English-disjoint split", "[data][translation]") {
  TranslationCorpus corpus = load_translation_corpus();
  WARN("iso-codes corpus, default languages: " << corpus.train.size() << " train / "
                                               << corpus.test.size() << " test pairs");
  CHECK(corpus.languages == default_translation_languages());
  CHECK(corpus.train.size() > 20000);
  CHECK(corpus.test.size() > 2000);

  std::set<std::string> train_english, test_english;
  for (const auto& p : corpus.train) train_english.insert(p.target);
  for (const auto& p : corpus.test) test_english.insert(p.target);
  for (const std::string& e : test_english) REQUIRE(train_english.count(e) == 0);  // no leakage
  const double held_out = static_cast<double>(test_english.size()) /
                          static_cast<double>(test_english.size() + train_english.size());
  CHECK(held_out == Approx(0.1).margin(0.02));

  for (const auto* split : {&corpus.train, &corpus.test})
    for (const TranslationPair& p : *split) {
      REQUIRE(p.source != p.target);  // drop_identical
      REQUIRE(p.source.size() <= 64);
      REQUIRE(p.target.size() <= 64);
      REQUIRE(!p.source.empty());
    }
  const bool german = has_pair(corpus.train, "allemand", "German", "fr") ||
                      has_pair(corpus.test, "allemand", "German", "fr");
  CHECK(german);
  const bool germany = has_pair(corpus.train, "Deutschland", "Germany", "de") ||
                       has_pair(corpus.test, "Deutschland", "Germany", "de");
  CHECK(germany);
}

TEST_CASE("Translation corpus: options and determinism", "[data][translation]") {
  TranslationCorpusOptions options;
  options.languages = {"sv"};
  options.catalogs = {"iso_3166-1"};
  options.test_fraction = 0.5;
  TranslationCorpus a = load_translation_corpus(options);
  TranslationCorpus b = load_translation_corpus(options);
  REQUIRE(a.train.size() == b.train.size());
  for (size_t i = 0; i < a.train.size(); ++i) CHECK(a.train[i].source == b.train[i].source);
  CHECK(a.train.size() + a.test.size() > 100);
  CHECK(a.test.size() > a.train.size() / 2);  // about half held out

  options.split_seed = 1;
  TranslationCorpus c = load_translation_corpus(options);
  CHECK(c.train.size() + c.test.size() == a.train.size() + a.test.size());
  bool differs = c.train.size() != a.train.size();
  for (size_t i = 0; !differs && i < a.train.size(); ++i)
    differs = a.train[i].target != c.train[i].target;
  CHECK(differs);

  options.drop_identical = false;
  options.max_bytes = 0;
  options.test_fraction = 0.0;
  TranslationCorpus all = load_translation_corpus(options);
  CHECK(all.test.empty());
  CHECK(all.train.size() > a.train.size() + a.test.size());
  CHECK(in_test_split("Germany", 1.0, 0));
  CHECK_FALSE(in_test_split("Germany", 0.0, 0));
}

TEST_CASE("Translation corpus: missing language and corrupt catalog", "[data][translation]") {
  const std::string root = testing::scratch_dir("locale");
  std::filesystem::create_directories(root + "/xx/LC_MESSAGES");
  testing::write_file(root + "/xx/LC_MESSAGES/iso_4217.mo", "not a catalog at all");
  TranslationCorpusOptions options;
  options.locale_dir = root;
  options.languages = {"zz"};
  CHECK_THROWS_WITH(load_translation_corpus(options),
                    Contains("language \"zz\"") && Contains(root + "/zz/LC_MESSAGES"));
  options.languages = {"xx"};
  CHECK_THROWS_WITH(load_translation_corpus(options),
                    Contains(root + "/xx/LC_MESSAGES/iso_4217.mo: not a GNU .mo file"));
}

TEST_CASE("Translation batches: tags, BOS/EOS shifting, padding and caps", "[data][translation]") {
  ByteTokenizer tok({"fr", "de"});
  std::vector<TranslationPair> pairs = {
      {"allemand", "German", "fr"}, {"Irland", "Ireland", "de"}, {"é", "e", "fr"}};
  TranslationBatch b = make_translation_batch(pairs, tok, {});
  REQUIRE(b.src.shape() == Shape{3, 9});      // "<fr>allemand"
  REQUIRE(b.tgt_in.shape() == Shape{3, 8});   // BOS + "Ireland"
  REQUIRE(b.tgt_out.shape() == Shape{3, 8});  // "Ireland" + EOS
  CHECK(b.src.dtype() == DType::kInt64);

  auto bytes = [&](const std::string& s) { return tok.encode(s); };
  std::vector<int64_t> want_src = {tok.language_id("fr")};
  for (int64_t id : bytes("é")) want_src.push_back(id);
  want_src.resize(9, ByteTokenizer::kPad);
  CHECK(row(b.src, 2) == want_src);
  std::vector<int64_t> in = {ByteTokenizer::kBos, tok.byte_id('G'),   tok.byte_id('e'),
                             tok.byte_id('r'),    tok.byte_id('m'),   tok.byte_id('a'),
                             tok.byte_id('n'),    ByteTokenizer::kPad};
  std::vector<int64_t> out = {tok.byte_id('G'),    tok.byte_id('e'),   tok.byte_id('r'),
                              tok.byte_id('m'),    tok.byte_id('a'),   tok.byte_id('n'),
                              ByteTokenizer::kEos, ByteTokenizer::kPad};
  CHECK(row(b.tgt_in, 0) == in);
  CHECK(row(b.tgt_out, 0) == out);
  CHECK(tok.decode(row(b.tgt_out, 1)) == "Ireland");
  CHECK(tok.decode(row(b.src, 1)) == "<de>Irland");

  TranslationBatch capped =
      make_translation_batch(pairs, tok, {.max_src_len = 4, .max_tgt_len = 3});
  CHECK(capped.src.shape() == Shape{3, 4});
  CHECK(capped.tgt_out.shape() == Shape{3, 3});
  CHECK(row(capped.tgt_in, 1) ==
        std::vector<int64_t>{ByteTokenizer::kBos, tok.byte_id('I'), tok.byte_id('r')});
  CHECK(row(capped.tgt_out, 1) ==
        std::vector<int64_t>{tok.byte_id('I'), tok.byte_id('r'), tok.byte_id('e')});
  CHECK(row(capped.tgt_out, 2) ==
        std::vector<int64_t>{tok.byte_id('e'), ByteTokenizer::kEos, ByteTokenizer::kPad});

  Batch batch = to_batch(b);
  REQUIRE(batch.inputs.size() == 2);
  REQUIRE(batch.targets.size() == 1);
  CHECK(batch.inputs[1].shape() == Shape{3, 8});
}

TEST_CASE("TranslationBatcher: fixed B, deterministic epochs, producer adapter",
          "[data][translation]") {
  ByteTokenizer tok({"fr"});
  std::vector<TranslationPair> pairs;
  for (int i = 0; i < 10; ++i)
    pairs.push_back({"s" + std::to_string(i), "t" + std::to_string(i), "fr"});
  TranslationBatcher a(pairs, tok, {.batch_size = 4, .seed = 3});
  TranslationBatcher b(pairs, tok, {.batch_size = 4, .seed = 3});
  CHECK(a.batches_per_epoch() == 2);
  std::set<std::string> seen;
  for (int i = 0; i < 2; ++i) {
    TranslationBatch x = a.next(), y = b.next();
    CHECK(x.src.shape()[0] == 4);
    CHECK(x.src.to_vector<int64_t>() == y.src.to_vector<int64_t>());
    for (int64_t r = 0; r < 4; ++r) seen.insert(tok.decode(row(x.tgt_out, r)));
  }
  CHECK(seen.size() == 8);
  CHECK(a.epoch() == 1);

  BatchProducer produce =
      translation_batch_producer(TranslationBatcher(pairs, tok, {.batch_size = 3}), 1);
  int count = 0;
  while (std::optional<Batch> batch = produce()) {
    CHECK(batch->inputs.size() == 2);
    ++count;
  }
  CHECK(count == 3);
  CHECK_THROWS_WITH(TranslationBatcher({{"a", "b", "it"}}, tok, {.batch_size = 1}),
                    Contains("unknown language \"it\""));
}
