// SentencePiece models trained here, on a few KB of made-up text, then read
// back through make_text_tokenizer: round trips, the vocabulary, the
// end-of-text id, and every refused file and training option.
#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_trainer.h>

#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/text_tokenizer.h"
#include "tests/test_util.h"

using namespace gpipe;
using Catch::Matchers::Contains;

namespace {

// Lines of pseudo-words built from a few syllables: enough repetition for
// merges, enough variety for a unigram model of ~100 pieces.
std::vector<std::string> made_up_lines(int count) {
  const std::vector<std::string> syllables = {"ka", "to", "ri",  "mu", "sen", "pla", "dor",
                                              "vi", "el", "qua", "ne", "so",  "ti",  "ber"};
  std::mt19937 rng(7);
  std::vector<std::string> lines;
  for (int i = 0; i < count; ++i) {
    std::string line;
    const int words = 4 + static_cast<int>(rng() % 6);
    for (int w = 0; w < words; ++w) {
      if (w) line += ' ';
      const int parts = 1 + static_cast<int>(rng() % 3);
      for (int p = 0; p < parts; ++p) line += syllables[rng() % syllables.size()];
    }
    lines.push_back(line);
  }
  return lines;
}

std::string corpus_file(const std::string& dir) {
  std::string text;
  for (const std::string& line : made_up_lines(400)) text += line + "\n";
  const std::string path = dir + "/corpus.txt";
  testing::write_file(path, text);
  return path;
}

std::string train(const std::string& dir, const std::string& type, int64_t vocab,
                  bool byte_fallback = false) {
  SentencePieceTrainOptions o;
  o.inputs = {corpus_file(dir)};
  o.model_prefix = dir + "/" + type;
  o.vocab_size = vocab;
  o.model_type = type;
  o.character_coverage = 1.0;
  o.byte_fallback = byte_fallback;
  train_sentencepiece(o);
  return o.model_prefix + ".model";
}

}  // namespace

TEST_CASE("a trained SentencePiece model round-trips through make_text_tokenizer") {
  const std::string dir = testing::scratch_dir("spm_round_trip");
  for (const std::string type : {"bpe", "unigram"}) {
    INFO(type);
    const std::string path = train(dir, type, 80);
    const auto tok = make_text_tokenizer(path);
    CHECK(tok->name() == path);
    CHECK(tok->vocab_size() == 80);
    CHECK(tok->eot_id() == 2);  // SentencePiece's default eos
    for (const std::string& line : made_up_lines(20)) {
      const std::vector<int64_t> ids = tok->encode(line);
      CHECK(ids.size() < line.size());  // the pieces are longer than one character
      for (const int64_t id : ids) CHECK((id >= 0 && id < tok->vocab_size()));
      CHECK(tok->decode(ids) == line);
    }
    // The end-of-text id renders as nothing.
    std::vector<int64_t> with_eot = tok->encode("kato rimu");
    with_eot.push_back(tok->eot_id());
    CHECK(tok->decode(with_eot) == "kato rimu");
    CHECK(tok->encode("").empty());
    CHECK_THROWS_WITH(tok->decode({80}), Contains("id 80 is outside the vocabulary [0, 80)"));
    CHECK_THROWS_WITH(tok->decode({-1}), Contains(path));
  }
}

TEST_CASE("SentencePiece: unknown characters, and byte fallback") {
  const std::string dir = testing::scratch_dir("spm_unknown");
  const auto plain = SentencePieceTokenizer::load(train(dir, "bpe", 60));
  const std::vector<int64_t> ids = plain->encode("ka \xe6\x97\xa5");  // "ka 日"
  CHECK(ids.back() == plain->unk_id());
  CHECK(plain->bos_id() == 1);
  CHECK(plain->pad_id() == -1);

  const std::string fallback_dir = testing::scratch_dir("spm_fallback");
  const auto bytes = make_text_tokenizer(train(fallback_dir, "bpe", 300, true));
  const std::string text = "ka \xe6\x97\xa5 to";
  CHECK(bytes->decode(bytes->encode(text)) == text);
}

TEST_CASE("SentencePiece: missing, corrupt and EOS-less model files are refused by name") {
  const std::string dir = testing::scratch_dir("spm_bad_files");
  CHECK_THROWS_WITH(make_text_tokenizer(dir + "/absent.model"),
                    Contains(dir + "/absent.model") && Contains("no such file"));
  testing::write_file(dir + "/text.model", "this is not a protocol buffer\n");
  CHECK_THROWS_WITH(make_text_tokenizer(dir + "/text.model"),
                    Contains(dir + "/text.model") && Contains("not a SentencePiece model"));
  testing::write_file(dir + "/empty.model", "");
  CHECK_THROWS_WITH(make_text_tokenizer(dir + "/empty.model"), Contains(dir + "/empty.model"));

  // A model trained without an EOS piece cannot separate documents.
  const std::string corpus = corpus_file(dir);
  const auto s = sentencepiece::SentencePieceTrainer::Train({{"input", corpus},
                                                             {"model_prefix", dir + "/no_eos"},
                                                             {"vocab_size", "50"},
                                                             {"model_type", "bpe"},
                                                             {"eos_id", "-1"},
                                                             {"minloglevel", "1"}});
  REQUIRE(s.ok());
  CHECK_THROWS_WITH(make_text_tokenizer(dir + "/no_eos.model"),
                    Contains(dir + "/no_eos.model") && Contains("no end-of-text (EOS) piece"));
  CHECK_THROWS_WITH(make_text_tokenizer("vocab.txt"),
                    Contains("unknown tokenizer 'vocab.txt'") && Contains(".model"));
}

TEST_CASE("train_sentencepiece refuses bad options by name") {
  const std::string dir = testing::scratch_dir("spm_bad_options");
  SentencePieceTrainOptions o;
  o.model_prefix = dir + "/m";
  o.vocab_size = 50;
  CHECK_THROWS_WITH(train_sentencepiece(o), Contains("no input files"));
  o.inputs = {dir + "/absent.txt"};
  CHECK_THROWS_WITH(train_sentencepiece(o), Contains("input '" + dir + "/absent.txt'"));
  o.inputs = {corpus_file(dir)};
  o.model_type = "wordpiece";
  CHECK_THROWS_WITH(train_sentencepiece(o),
                    Contains("model type 'wordpiece'") && Contains("expected unigram or bpe"));
  o.model_type = "bpe";
  o.vocab_size = 2;
  CHECK_THROWS_WITH(train_sentencepiece(o), Contains("vocabulary size 2 is too small"));
  o.vocab_size = 100000;  // more pieces than the text has
  CHECK_THROWS_WITH(train_sentencepiece(o), Contains("failed") && Contains("Vocabulary size"));
  o.vocab_size = 50;
  o.character_coverage = 1.5;
  CHECK_THROWS_WITH(train_sentencepiece(o), Contains("character coverage 1.5"));
  o.character_coverage = 1.0;
  o.model_prefix = dir + "/no/such/dir/m";
  CHECK_THROWS_WITH(train_sentencepiece(o), Contains("'" + dir + "/no/such/dir/m'"));
}
