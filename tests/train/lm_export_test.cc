// gpipe_train --model=gpt2 --export-data: data.json holds each step's rows
// as the tokens the trainer's batches carry, the evaluated held-out rows
// and the eval-mode losses of the initial weights, which the exported
// Hugging Face folder reproduces.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <sstream>

#include "optim/json.h"
#include "tests/test_util.h"
#include "tests/train/trainer_testing.h"
#include "tools/train/config.h"
#include "tools/train/hf_io.h"
#include "tools/train/task.h"
#include "tools/train/trainer.h"

using namespace gpipe;
using namespace gpipe::train;
using Catch::Contains;
using gpipe::testing::read_file;
using gpipe::train::testing::temp_path;
using gpipe::train::testing::with;

namespace {

namespace json = optim::json;

const json::Value& member(const json::Value& v, const char* key) {
  const json::Value* m = v.find(key);
  INFO(key);
  REQUIRE(m != nullptr);
  return *m;
}

double number(const json::Value& v) { return std::strtod(v.text.c_str(), nullptr); }

std::vector<int64_t> ints(const json::Value& v) {
  REQUIRE(v.kind == json::Value::Kind::kArray);
  std::vector<int64_t> out;
  for (const json::Value& x : v.items) out.push_back(std::strtoll(x.text.c_str(), nullptr, 10));
  return out;
}

}  // namespace

TEST_CASE("gpipe_train --model=gpt2 --export-data writes the batches, held-out rows and losses") {
  const std::string dir = temp_path("lm-export");
  const std::vector<std::string> base = {
      "--model=gpt2",  "--layers=2",       "--dim=32",          "--heads=4", "--context=32",
      "--batch=8",     "--steps=6",        "--train-limit=400", "--K=2",     "--threads=1",
      "--dropout=0.1", "--eval-batches=2", "--log-every=1"};
  const std::vector<std::string> flags = with(base, {"--seed=5"});
  std::ostringstream log;
  const TrainSummary s =
      train::train(parse_train_flags(with(flags, {"--export-data=" + dir})), log);
  INFO(log.str());
  CHECK(s.losses.empty());
  CHECK_THAT(log.str(), Contains("(data.json, init.safetensors, init-hf/)"));

  const json::Value root = json::parse(read_file(dir + "/data.json"));
  CHECK(member(root, "format").text == "gpipe-lm-export/1");
  CHECK(number(member(root, "steps")) == 6);
  CHECK(number(member(root, "context")) == 32);
  const json::Value& model = member(root, "model");
  CHECK(member(model, "arch").text == "gpt2");
  CHECK(number(member(model, "dropout")) == 0.1);
  CHECK(member(member(root, "settings"), "optimizer").text == "Adam");

  // Each step's rows, looked up in train_rows, are the tokens of batch_at(step).
  const TrainConfig c = parse_train_flags(flags);
  const std::unique_ptr<Task> task = make_task(c);
  std::map<int64_t, std::vector<int64_t>> rows;
  for (const json::Value& r : member(root, "train_rows").items) {
    REQUIRE(r.items.size() == 2);
    rows[std::strtoll(r.items[0].text.c_str(), nullptr, 10)] = ints(r.items[1]);
  }
  const json::Value& steps = member(root, "step_rows");
  REQUIRE(steps.items.size() == 6);
  for (int64_t step = 0; step < 6; ++step) {
    INFO("step " << step);
    const Batch b = task->batch_at(step);
    const std::vector<int64_t> in = b.inputs[0].to_vector<int64_t>(),
                               out = b.targets[0].to_vector<int64_t>();
    std::vector<int64_t> want_in, want_out;
    for (int64_t r : ints(steps.items[step])) {
      REQUIRE(rows.count(r) == 1);
      const std::vector<int64_t>& t = rows[r];
      REQUIRE(t.size() == 33);
      want_in.insert(want_in.end(), t.begin(), t.end() - 1);
      want_out.insert(want_out.end(), t.begin() + 1, t.end());
    }
    CHECK(in == want_in);
    CHECK(out == want_out);
  }
  CHECK(member(root, "eval_rows").items.size() == 16);  // --eval-batches=2 of 8

  // The losses are the initial model's: a pipeline of another seed, loaded
  // from the exported Hugging Face folder, gives them again.
  const json::Value& check = member(root, "check");
  const TrainConfig other = parse_train_flags(with(base, {"--seed=6"}));
  Pipeline pipe(make_task(other)->make_model(), resolve_pipeline(other), task->batch_at(0));
  const double fresh = pipe.evaluate(task->batch_at(0), 1);
  CHECK(fresh != Approx(number(member(check, "step0_loss"))).epsilon(1e-6));
  load_hf_weights(dir + "/init-hf", lm_model_config(c), pipe.named_state());
  CHECK(pipe.evaluate(task->batch_at(0), 1) ==
        Approx(number(member(check, "step0_loss"))).epsilon(1e-6));
  CHECK(task->evaluate(pipe).loss == Approx(number(member(check, "heldout_loss"))).epsilon(1e-6));
}

TEST_CASE("gpipe_train --export-data: the language models refuse --doc-mask") {
  std::ostringstream log;
  const std::vector<std::string> flags = {
      "--model=llama",     "--layers=1", "--dim=32",   "--heads=4",
      "--train-limit=200", "--steps=2",  "--doc-mask", "--export-data=" + temp_path("lm-mask")};
  CHECK_THROWS_WITH(train::train(parse_train_flags(flags), log), Contains("drop --doc-mask"));
}
