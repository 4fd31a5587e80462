// The data position in gpipe_train's checkpoints (Note [Data position] in
// tools/train/data_position.cc): a run stopped inside an epoch and resumed
// across the epoch boundary repeats the uninterrupted losses bit for bit; the
// checkpoint names the epoch, the batch in it and, for the LM task, the file
// and line the next batch starts at; a resume on other data is refused by
// name, one in another order is warned about.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "optim/safetensors.h"
#include "tests/train/trainer_testing.h"
#include "tools/train/config.h"
#include "tools/train/task.h"
#include "tools/train/trainer.h"

using namespace gpipe;
using namespace gpipe::train;
using Catch::Contains;

namespace {

using testing::check_resume_is_exact;
using testing::temp_path;
using testing::with;

// Tiny GPT-2 on the first `documents` fortunes: a few batches per epoch.
std::vector<std::string> tiny_gpt2(int documents) {
  return {"--model=gpt2",
          "--layers=2",
          "--dim=32",
          "--heads=4",
          "--context=32",
          "--batch=8",
          "--K=2",
          "--M=2",
          "--threads=1",
          "--log-every=1",
          "--eval-batches=1",
          "--dropout=0.1",
          "--train-limit=" + std::to_string(documents)};
}

int64_t number(const std::map<std::string, std::string>& m, const std::string& key) {
  INFO(key);
  REQUIRE(m.count(key));
  return std::stoll(m.at(key));
}

// Line `line` (1-based) of `file`.
std::string line_of(const std::string& file, int64_t line) {
  std::ifstream in(file);
  std::string text;
  for (int64_t i = 0; i < line && std::getline(in, text); ++i) {
  }
  return text;
}

}  // namespace

TEST_CASE(
    "gpipe_train: GPT-2 stopped inside epoch 0 and resumed across the epoch boundary repeats the "
    "losses; the checkpoint names the position") {
  const std::vector<std::string> base = tiny_gpt2(3);
  const auto task = make_task(parse_train_flags(base));
  const int64_t per_epoch = number(task->data_position(0), "data.batches_per_epoch");
  REQUIRE(per_epoch >= 2);  // the stop is inside epoch 0
  REQUIRE(per_epoch <= 5);  // and the resumed steps cross into epoch 1 quickly
  const int64_t stop = per_epoch - 1;
  const std::string ck = check_resume_is_exact(base, "gpt2-epochs", stop + 3, stop);

  const auto meta = optim::load_safetensors(ck).metadata;
  CHECK(number(meta, "data.epoch") == 0);
  CHECK(number(meta, "data.batch_in_epoch") == stop);
  CHECK(number(meta, "data.batches_per_epoch") == per_epoch);
  CHECK(number(meta, "data.examples") == task->train_size());
  CHECK(number(meta, "data.batch") == 8);
  CHECK_THAT(meta.at("data.fingerprint"), Contains("/usr/share/games/fortunes"));
  // "<fortune file>:<line>", and that line ends with the text the next batch's first row starts
  // with.
  const std::string source = meta.at("data.next_source");
  std::smatch m;
  REQUIRE(std::regex_match(source, m, std::regex("(/usr/share/games/fortunes/[^:]+):([0-9]+)")));
  const Batch next = task->batch_at(stop);
  const std::vector<int64_t> ids = next.inputs[0].to_vector<int64_t>();
  std::string head;  // bytes up to the first newline or end-of-text
  for (size_t i = 0; i < 32 && ids[i] < 256 && ids[i] != '\n'; ++i)
    head += static_cast<char>(ids[i]);
  const std::string line = line_of(m[1], std::stoll(m[2]));
  INFO("next batch starts with '" << head << "', " << source << " is '" << line << "'");
  CHECK(line.size() >= head.size());
  CHECK(line.compare(line.size() - head.size(), head.size(), head) == 0);

  // The position after an epoch boundary: epoch 1, batch 1.
  CHECK(task->data_position(per_epoch + 1).at("data.epoch") == "1");
  CHECK(task->data_position(per_epoch + 1).at("data.batch_in_epoch") == "1");
}

TEST_CASE("gpipe_train --resume: other data is refused by name; another --batch is a warning") {
  const std::vector<std::string> base = tiny_gpt2(3);
  const std::string ck = temp_path("lm-position.safetensors");
  std::ostringstream log;
  train::train(parse_train_flags(with(base, {"--steps=1", "--save=" + ck, "--no-final-eval"})),
               log);
  std::vector<std::string> more = tiny_gpt2(4);  // one more document: other rows
  std::ostringstream refused;
  CHECK_THROWS_WITH(
      train::train(parse_train_flags(with(more, {"--steps=2", "--resume=" + ck})), refused),
      Contains("--resume: the checkpoint " + ck) && Contains("other training data") &&
          Contains("data.examples is '") && Contains("data.fingerprint is '") &&
          Contains("train_limit=3' in the checkpoint") &&
          Contains("(expected the data set it was saved with)"));

  // The same data in another order (--batch=4): the run goes on, with a warning naming both orders.
  std::vector<std::string> smaller = base;
  std::replace(smaller.begin(), smaller.end(), std::string("--batch=8"), std::string("--batch=4"));
  std::ostringstream warned;
  train::train(parse_train_flags(with(smaller, {"--steps=2", "--resume=" + ck, "--no-final-eval"})),
               warned);
  CHECK_THAT(warned.str(), Contains("warning: --resume: the checkpoint's next batch was epoch 0, "
                                    "batch 1 of") &&
                               Contains("(batch size 8,") && Contains("(batch size 4,"));
}

TEST_CASE("gpipe_train: the image and translation tasks record their position too") {
  for (const std::vector<std::string>& flags :
       {testing::tiny_amoebanet(), testing::tiny_transformer(0.0)}) {
    const auto task = make_task(parse_train_flags(flags));
    const int64_t per_epoch = number(task->data_position(0), "data.batches_per_epoch");
    const auto p = task->data_position(per_epoch + 1);
    INFO(flags[0]);
    CHECK(per_epoch == task->train_size() / 16);
    CHECK(p.at("data.epoch") == "1");
    CHECK(p.at("data.batch_in_epoch") == "1");
    CHECK(p.at("data.examples") == std::to_string(task->train_size()));
    CHECK(p.count("data.fingerprint") == 1);
    CHECK(p.count("data.next_source") == 0);
  }
}

TEST_CASE("gpipe_train --resume: a --data file rewritten under its name is refused") {
  const std::string dir = temp_path("lm-files");
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/corpus.txt";
  std::string text;
  for (int i = 0; i < 200; ++i) text += "line " + std::to_string(i) + " of the corpus text.\n";
  std::ofstream(file) << text;
  std::vector<std::string> base = tiny_gpt2(3);
  base.pop_back();  // --train-limit: the file is one document
  base.push_back("--data=" + file);
  base.push_back("--val-fraction=0");
  const std::string ck = temp_path("lm-files.safetensors");
  std::ostringstream log;
  train::train(parse_train_flags(with(base, {"--steps=1", "--save=" + ck, "--no-final-eval"})),
               log);
  CHECK_THAT(optim::load_safetensors(ck).metadata.at("data.fingerprint"), Contains(" files="));
  // The same name, one more byte: the fingerprint differs even if the rows still fit.
  std::ofstream(file) << text << "!";
  std::ostringstream refused;
  CHECK_THROWS_WITH(
      train::train(parse_train_flags(with(base, {"--steps=2", "--resume=" + ck})), refused),
      Contains("other training data") && Contains("data.fingerprint is '"));
}
