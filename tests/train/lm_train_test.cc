// gpipe_train --model=gpt2 | llama: the default corpus (Debian's fortunes)
// trains a tiny model through a pipeline, the held-out loss and perplexity
// are reported, a resumed run repeats the uninterrupted one's losses bit for
// bit, and flags that do not fit the model are refused by name.
#include <catch2/catch.hpp>
#include <cmath>
#include <sstream>

#include "tests/train/trainer_testing.h"
#include "tools/train/config.h"
#include "tools/train/task.h"
#include "tools/train/trainer.h"

using namespace gpipe;
using namespace gpipe::train;
using Catch::Contains;

namespace {

using testing::check_resume_is_exact;
using testing::with;

std::vector<std::string> tiny_lm(const std::string& arch) {
  std::vector<std::string> a = {"--model=" + arch,   "--layers=2",    "--dim=32",
                                "--heads=4",         "--context=32",  "--batch=8",
                                "--train-limit=400", "--K=2",         "--M=2",
                                "--threads=1",       "--log-every=1", "--eval-batches=2"};
  if (arch == "llama") a.push_back("--kv-heads=2");
  return a;
}

std::string usage_error(const std::vector<std::string>& args) {
  try {
    parse_train_flags(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("gpipe_train: tiny GPT-2 and Llama learn the fortunes through a pipeline") {
  for (const std::string arch : {"gpt2", "llama"}) {
    INFO(arch);
    std::ostringstream log;
    const TrainSummary s =
        train::train(parse_train_flags(with(tiny_lm(arch),
                                            {"--steps=25", "--lr=3e-3", "--lr-schedule=constant"})),
                     log);
    INFO(log.str());
    REQUIRE(s.losses.size() == 25);
    CHECK(s.losses.front() > 4.5);  // about ln 257 at the start
    CHECK(s.losses.back() < s.losses.front() - 1.0);
    REQUIRE(s.final_eval.has_value());
    REQUIRE(s.final_eval->perplexity.has_value());
    CHECK(*s.final_eval->perplexity == Approx(std::exp(s.final_eval->loss)));
    CHECK(s.final_eval->examples == 16);
    CHECK_THAT(log.str(), Contains("text from /usr/share/games/fortunes") &&
                              Contains("tokenizer bytes (vocabulary 257)") &&
                              Contains("perplexity") && Contains("tok/s"));
  }
}

TEST_CASE("gpipe_train: a resumed Llama run with dropout repeats the uninterrupted losses") {
  check_resume_is_exact(with(tiny_lm("llama"), {"--dropout=0.1"}), "llama");
}

TEST_CASE("gpipe_train: language-model flags that do not fit are refused by name") {
  CHECK_THAT(usage_error({"--model=gpt2", "--kv-heads=2"}),
             Contains("--kv-heads: applies to --model=llama only"));
  CHECK_THAT(usage_error({"--model=gpt2", "--preset=llama-3.2-1b"}),
             Contains("--preset=llama-3.2-1b: a llama size, not --model=gpt2"));
  CHECK_THAT(usage_error({"--model=llama", "--preset=llama-3.2-1b", "--layers=2"}),
             Contains("the preset fixes"));
  CHECK_THAT(usage_error({"--model=gpt2", "--preset=gpt2", "--context=2048"}),
             Contains("--context=2048: more than the gpt2 model's 1024 positions"));
  CHECK_THAT(usage_error({"--model=llama", "--heads=4", "--kv-heads=3"}),
             Contains("heads 4 is not a multiple of kv-heads 3"));
  CHECK_THAT(usage_error({"--model=transformer", "--context=64"}),
             Contains("--context: applies to --model=gpt2, llama only"));
  CHECK_THAT(usage_error({"--model=gpt2", "--K=20"}), Contains("--layers=L gives 2L+2 layers"));
  std::ostringstream log;
  CHECK_THROWS_WITH(
      train::train(parse_train_flags(with(tiny_lm("gpt2"), {"--vocab=100", "--steps=1"})), log),
      Contains("--vocab=100: smaller than the bytes tokenizer's vocabulary of 257"));
}

TEST_CASE("gpipe_train --print-params: the presets' Hugging Face counts, and this run's") {
  std::ostringstream log;
  const TrainSummary s = train::train(
      parse_train_flags({"--model=llama", "--preset=llama-3.1-8b", "--print-params"}), log);
  CHECK(s.parameters == 8030261248);
  CHECK_THAT(log.str(), Contains("8,030,261,248 parameters") &&
                            Contains("with this run's bytes vocabulary of 257"));
  // With no size flag the small default (4 blocks of d 128).
  const TrainConfig c = parse_train_flags({"--model=gpt2", "--steps=1"});
  const models::LmConfig m = lm_model_config(c);
  CHECK(m.layers == 4);
  CHECK(m.dim == 128);
  CHECK(m.vocab == 257);
  CHECK(c.dropout == 0);
}
