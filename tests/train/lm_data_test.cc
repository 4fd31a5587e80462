// gpipe_train --model=gpt2 | llama on the user's own data: --data given as
// a .txt, a .jsonl and an llm.c .bin shard each trains, --val-data names the
// held-out rows, --doc-mask trains through a pipeline, and bad data is
// refused naming the file.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "data/token_shard.h"
#include "tests/test_util.h"
#include "tests/train/trainer_testing.h"
#include "tools/train/config.h"
#include "tools/train/trainer.h"

using namespace gpipe;
using namespace gpipe::train;
using Catch::Contains;

namespace {

using train::testing::with;

std::vector<std::string> tiny(const std::string& arch, const std::string& data) {
  std::vector<std::string> a = {"--model=" + arch, "--layers=1",    "--dim=16",  "--heads=2",
                                "--context=16",    "--batch=4",     "--K=2",     "--M=2",
                                "--threads=1",     "--log-every=1", "--steps=2", "--eval-batches=1",
                                "--data=" + data};
  return a;
}

// Sentences of a small made-up corpus, one a document.
std::vector<std::string> sentences() {
  std::vector<std::string> s;
  for (int i = 0; i < 40; ++i)
    s.push_back("Document number " + std::to_string(i) + " says hello to the pipeline.");
  return s;
}

TrainSummary run(const std::vector<std::string>& args, std::string& log) {
  std::ostringstream out;
  TrainSummary s = train::train(parse_train_flags(args), out);
  log = out.str();
  return s;
}

std::string error_of(const std::vector<std::string>& args) {
  std::ostringstream out;
  try {
    train::train(parse_train_flags(args), out);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("gpipe_train --data: a .txt, a .jsonl and an llm.c shard each train") {
  const std::string d = gpipe::testing::scratch_dir("lm_data_formats");
  std::string txt, jsonl;
  std::vector<int64_t> ids;
  for (const std::string& s : sentences()) {
    txt += s + "\n\n";
    jsonl += "{\"id\": 1, \"text\": \"" + s + "\"}\n";
    for (const char ch : s) ids.push_back(static_cast<uint8_t>(ch));
    ids.push_back(256);  // the bytes tokenizer's end-of-text
  }
  gpipe::testing::write_file(d + "/a.txt", txt);
  gpipe::testing::write_file(d + "/b.jsonl", jsonl);
  write_token_shard(d + "/c.bin", ids, 1);
  for (const std::string file : {"a.txt", "b.jsonl", "c.bin"}) {
    INFO(file);
    std::string log;
    std::vector<std::string> args = tiny("gpt2", d + "/" + file);
    if (file == "a.txt") args.push_back("--doc-split=blank");
    const TrainSummary s = run(args, log);
    INFO(log);
    REQUIRE(s.losses.size() == 2);
    CHECK(std::isfinite(s.losses.back()));
    CHECK(s.losses.front() > 4.5);  // about ln 257
    REQUIRE(s.final_eval.has_value());
    CHECK(s.final_eval->examples > 0);
    CHECK_THAT(log, Contains("text from " + d + "/" + file));
    if (file == "c.bin") {
      CHECK_THAT(log, Contains("shard tokens"));
    } else {
      CHECK_THAT(log, Contains("38 training documents") && Contains("2 held out"));
    }
  }
  // --val-data names the held-out rows; a folder takes every file in it.
  // --doc-mask under bf16: the document ids ride beside 16-bit states.
  std::filesystem::create_directories(d + "/val");
  gpipe::testing::write_file(d + "/val/v.txt", txt.substr(0, 400));
  std::vector<std::string> args = tiny("llama", d + "/a.txt");
  std::erase(args, "--eval-batches=1");  // every held-out row
  std::string log;
  const TrainSummary s = run(with(args, {"--doc-split=blank", "--val-data=" + d + "/val",
                                         "--doc-mask", "--precision=bf16"}),
                             log);
  INFO(log);
  CHECK_THAT(log, Contains("40 training documents") && Contains("attention inside documents"));
  REQUIRE(s.final_eval.has_value());
  // 9 documents: 8 of 45 bytes and a cut one of 24, each with its newline
  // and end-of-text id: 402 tokens, (402 - 1) / 16 rows.
  CHECK(s.final_eval->examples == 25);
}

TEST_CASE("gpipe_train --data: bad data is refused naming the file") {
  const std::string d = gpipe::testing::scratch_dir("lm_data_refusals");
  gpipe::testing::write_file(d + "/notes.csv", "a,b\n");
  CHECK_THAT(error_of(tiny("gpt2", d + "/notes.csv")),
             Contains("notes.csv': unknown data format '.csv'") && Contains(".jsonl"));
  CHECK_THAT(error_of(tiny("gpt2", d + "/missing.txt")), Contains("missing.txt' does not exist"));
  gpipe::testing::write_file(d + "/bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": 7}\n");
  CHECK_THAT(error_of(tiny("gpt2", d + "/bad.jsonl")),
             Contains("bad.jsonl:2") && Contains("expected a string"));
  write_token_shard(d + "/wide.bin", std::vector<int64_t>(100, 300), 1);
  CHECK_THAT(error_of(tiny("gpt2", d + "/wide.bin")),
             Contains("wide.bin': holds id 300, beyond the bytes tokenizer's vocabulary of 257"));
  gpipe::testing::write_file(d + "/small.txt", "too little text");
  CHECK_THAT(error_of(tiny("gpt2", d + "/small.txt")),
             Contains("small.txt) makes 0 rows of 17 tokens, fewer than --batch=4"));
}
