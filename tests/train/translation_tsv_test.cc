// gpipe_train --model=transformer --data=TRAIN.tsv: the user's own pairs,
// read with bytes or a SentencePiece model trained here, a tiny model
// trained two steps and evaluated (loss, chrF of decoded text); malformed
// files and flags that do not go with --data are refused by name.
#include "data/translation_tsv.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/sentencepiece_tokenizer.h"
#include "tests/test_util.h"
#include "tools/train/config.h"
#include "tools/train/task.h"
#include "tools/train/trainer.h"

using namespace gpipe;
using namespace gpipe::train;
using Catch::Contains;

namespace {

const std::vector<std::string> kNumbers = {"zero", "one", "two",   "three", "four",
                                           "five", "six", "seven", "eight", "nine"};
const std::vector<std::string> kNombres = {"zéro", "un",  "deux", "trois", "quatre",
                                           "cinq", "six", "sept", "huit",  "neuf"};

// "three one" <TAB> "trois un": pairs of number words, English to French.
std::string number_pairs(int first, int count) {
  std::string tsv;
  for (int i = first; i < first + count; ++i) {
    const int a = i % 10, b = (i / 10) % 10;
    tsv += kNumbers[a] + " " + kNumbers[b] + "\t" + kNombres[a] + " " + kNombres[b] + "\n";
  }
  return tsv;
}

struct Files {
  std::string dir, train, dev;
};

Files write_files() {
  Files f;
  f.dir = gpipe::testing::scratch_dir("translation_tsv");
  f.train = f.dir + "/train.tsv";
  f.dev = f.dir + "/dev.tsv";
  gpipe::testing::write_file(f.train, number_pairs(0, 80));
  gpipe::testing::write_file(
      f.dev, "nine one\tneuf un\r\n\nfour four\tquatre quatre\n" + number_pairs(81, 6));
  return f;
}

std::vector<std::string> tiny(const Files& f, std::initializer_list<std::string> more) {
  std::vector<std::string> args = {
      "--model=transformer", "--data=" + f.train, "--layers=1",         "--ffn=32",
      "--heads=2",           "--dim=16",          "--max-len=24",       "--batch=8",
      "--threads=1",         "--steps=2",         "--eval-sentences=4", "--samples=1",
      "--log-every=1"};
  for (const std::string& m : more) {  // replaces a default of the same flag
    const std::string flag = m.substr(0, m.find('=') + 1);
    std::erase_if(args, [&](const std::string& a) { return a.rfind(flag, 0) == 0; });
    args.push_back(m);
  }
  return args;
}

void check_run(const TrainSummary& s, const std::string& log) {
  INFO(log);
  REQUIRE(s.losses.size() == 2);
  for (const double l : s.losses) CHECK(std::isfinite(l));
  REQUIRE(s.final_eval.has_value());
  CHECK(std::isfinite(s.final_eval->loss));
  REQUIRE(s.final_eval->chrf.has_value());
  CHECK(*s.final_eval->chrf >= 0.0);
  REQUIRE(s.final_eval->samples.size() == 4);
  CHECK_THAT(log, Contains("translation pairs from") && Contains("chrF"));
}

}  // namespace

TEST_CASE("translation TSV: pairs, CRLF and blank lines; malformed lines name file:line") {
  const auto pairs = parse_translation_tsv("a b\tx y\r\n\nc\td\n", "f.tsv");
  REQUIRE(pairs.size() == 2);
  CHECK(pairs[0].source == "a b");
  CHECK(pairs[0].target == "x y");
  CHECK(pairs[1].source == "c");
  CHECK(pairs[1].language.empty());
  CHECK_THROWS_WITH(parse_translation_tsv("a\tb\nno tab here\n", "f.tsv"),
                    Contains("f.tsv:2: expected source<TAB>target, found no tab"));
  CHECK_THROWS_WITH(parse_translation_tsv("a\tb\tc\n", "f.tsv"),
                    Contains("f.tsv:1:") && Contains("found 2 tabs"));
  CHECK_THROWS_WITH(parse_translation_tsv("\tb\n", "f.tsv"), Contains("the source is empty"));
  CHECK_THROWS_WITH(parse_translation_tsv("a\tb\na\t\r\n", "f.tsv"),
                    Contains("f.tsv:2:") && Contains("the target is empty"));
  CHECK_THROWS_WITH(read_translation_tsv("/nonexistent/train.tsv"),
                    Contains("'/nonexistent/train.tsv': cannot open"));
  const std::string dir = gpipe::testing::scratch_dir("translation_tsv_empty");
  gpipe::testing::write_file(dir + "/empty.tsv", "\n\n");
  CHECK_THROWS_WITH(read_translation_tsv(dir + "/empty.tsv"), Contains("holds no pairs"));
}

TEST_CASE("gpipe_train: the transformer trains on TSV pairs with bytes and evaluates chrF") {
  const Files f = write_files();
  std::ostringstream log;
  const TrainConfig c = parse_train_flags(tiny(f, {"--val-data=" + f.dev}));
  CHECK(transformer_config(c).vocab == 4 + 257);  // PAD BOS EOS UNK, then the bytes tokenizer's
  const TrainSummary s = train::train(c, log);
  check_run(s, log.str());
  CHECK(s.final_eval->examples == 8);    // the dev file's pairs (its CRLF and blank line read)
  std::vector<std::string> dev_targets;  // the samples are the dev file's pairs, decoded
  for (const auto& p : read_translation_tsv(f.dev)) dev_targets.push_back(p.target);
  for (const auto& sample : s.final_eval->samples) {
    CHECK(std::find(dev_targets.begin(), dev_targets.end(), sample.reference) != dev_targets.end());
    CHECK(sample.language.empty());
  }
}

TEST_CASE("gpipe_train: the transformer trains on TSV pairs with SentencePiece tokenizers") {
  const Files f = write_files();
  // A SentencePiece model of both sides' words.
  const std::string text = f.dir + "/text.txt";
  std::string lines;
  for (const auto& p : read_translation_tsv(f.train)) lines += p.source + "\n" + p.target + "\n";
  gpipe::testing::write_file(text, lines);
  SentencePieceTrainOptions o;
  o.inputs = {text};
  o.model_prefix = f.dir + "/spm";
  o.vocab_size = 48;
  o.model_type = "bpe";
  o.character_coverage = 1.0;
  train_sentencepiece(o);
  const std::string model = f.dir + "/spm.model";

  std::ostringstream log;
  const TrainConfig shared = parse_train_flags(tiny(f, {"--tokenizer=" + model}));
  CHECK(transformer_config(shared).vocab == 4 + 48);
  const TrainSummary s = train::train(shared, log);  // --val-fraction's share held out
  check_run(s, log.str());
  CHECK_THAT(log.str(), Contains("held out of --data") && Contains(model));

  // One tokenizer per side: the vocabulary fits the larger.
  std::ostringstream log2;
  const TrainConfig sides = parse_train_flags(
      tiny(f, {"--val-data=" + f.dev, "--src-tokenizer=bytes", "--tgt-tokenizer=" + model}));
  CHECK(transformer_config(sides).vocab == 4 + 257);
  const TrainSummary s2 = train::train(sides, log2);
  check_run(s2, log2.str());
}

TEST_CASE("gpipe_train: malformed TSV files and flags that do not go with --data are refused") {
  const Files f = write_files();
  gpipe::testing::write_file(f.dir + "/bad.tsv", "one\tun\ntwo deux\n");
  std::ostringstream log;
  CHECK_THROWS_WITH(
      train::train(parse_train_flags(tiny(f, {"--val-data=" + f.dir + "/bad.tsv"})), log),
      Contains(f.dir + "/bad.tsv:2: expected source<TAB>target"));
  CHECK_THROWS_WITH(
      train::train(parse_train_flags(tiny(f, {"--tokenizer=" + f.dir + "/x.model"})), log),
      Contains(f.dir + "/x.model") && Contains("no such file"));
  CHECK_THROWS_WITH(train::train(parse_train_flags(tiny(f, {"--max-len=4"})), log),
                    Contains("longer than --max-len=4"));
  CHECK_THROWS_WITH(parse_train_flags(tiny(f, {"--languages=fr"})),
                    Contains("--languages") && Contains("not to --data"));
  CHECK_THROWS_WITH(parse_train_flags({"--model=transformer", "--tokenizer=bytes"}),
                    Contains("--tokenizer") && Contains("with --data=TRAIN.tsv only"));
  CHECK_THROWS_WITH(parse_train_flags({"--model=resnet", "--src-tokenizer=bytes"}),
                    Contains("--src-tokenizer: applies to --model=transformer only"));
}
