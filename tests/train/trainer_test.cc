// Whole training runs through train(), on slices of the real data sets
// (iso-codes, Fashion-MNIST from /usr/share), with tiny models and a few
// steps: the metrics file, exact resumption, and checkpoint errors.
#include "tools/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "optim/checkpoint.h"
#include "tests/train/trainer_testing.h"
#include "tools/train/config.h"
#include "tools/train/metrics_log.h"
#include "tools/train/task.h"
#include "tools/train/version.h"

using namespace gpipe;
using namespace gpipe::train;
using Catch::Contains;
using Catch::StartsWith;

namespace {

using testing::check_resume_is_exact;
using testing::temp_path;
using testing::tiny_amoebanet;
using testing::tiny_transformer;
using testing::with;

}  // namespace

TEST_CASE("gpipe_train: a tiny transformer on a slice of iso-codes learns and writes its metrics") {
  const std::string metrics = temp_path("metrics.jsonl");
  std::ostringstream log;
  const TrainSummary s = train::train(
      parse_train_flags(
          with(tiny_transformer(0.1),
               {"--steps=3", "--lr=1e-2", "--lr-schedule=constant", "--metrics=" + metrics})),
      log);
  INFO(log.str());
  REQUIRE(s.losses.size() == 3);
  for (double l : s.losses) CHECK(std::isfinite(l));
  CHECK(s.losses.back() < s.losses.front());
  CHECK(s.skipped_steps == 0);
  CHECK(s.ideal_bubble == Approx(1.0 / 3));
  REQUIRE(s.final_eval.has_value());
  CHECK(s.final_eval->chrf.has_value());
  CHECK(s.final_eval->samples.size() == 4);
  CHECK_THAT(log.str(), Contains("cell") && Contains("cpu:1") && Contains("parameters") &&
                            Contains("step 3/3") && Contains("tok/s") && Contains("ETA") &&
                            Contains("bubble fraction measured") && Contains("chrF") &&
                            Contains("reference:"));
  // Each progress line names the bytes the devices hold between steps;
  // they stay the same from step to step (nothing leaks).
  std::vector<std::string> live;
  std::istringstream lines_in(log.str());
  for (std::string line; std::getline(lines_in, line);) {
    if (line.rfind("step ", 0) != 0) continue;
    const size_t at = line.find("  live ");
    REQUIRE(at != std::string::npos);
    live.push_back(line.substr(at + 7, line.find(" MB", at + 7) - (at + 7)));
  }
  REQUIRE(live.size() == 3);
  CHECK(std::stod(live[0]) > 0.0);
  CHECK(live[2] == live[0]);

  std::ifstream in(metrics);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  // The run's line (gpipe's version and commit), 3 steps, the final evaluation, its 4
  // translations.
  REQUIRE(lines.size() == 9);
  CHECK_THAT(lines[0], Contains(std::string("{\"type\":\"run\",\"version\":\"") + gpipe::version() +
                                "\",\"commit\":\"" + gpipe::build_commit() + "\""));
  CHECK_THAT(log.str(), StartsWith(gpipe::version_line("gpipe_train")));
  lines.erase(lines.begin());
  for (int i = 0; i < 3; ++i) {
    INFO(lines[i]);
    for (const char* key :
         {"\"type\":\"train\"", "\"step\":", "\"loss\":", "\"lr\":", "\"examples_per_s\":",
          "\"tokens_per_s\":", "\"seconds\":", "\"peak_activation_mb\":[", "\"bubble_fraction\":"})
      CHECK_THAT(lines[i], Contains(key));
  }
  CHECK_THAT(lines[0], Contains("\"step\":1,"));
  CHECK_THAT(lines[3],
             Contains("\"type\":\"eval\"") && Contains("\"chrf\":") && Contains("\"loss\":"));
  // Every translation of the final evaluation, as decoded, for scoring elsewhere.
  for (int i = 0; i < 4; ++i) {
    const SampleTranslation& t = s.final_eval->samples[i];
    INFO(lines[4 + i]);
    CHECK_THAT(lines[4 + i], Contains("{\"type\":\"translation\",\"step\":3,") &&
                                 Contains("\"language\":" + json_string(t.language)) &&
                                 Contains("\"source\":" + json_string(t.source)) &&
                                 Contains("\"reference\":" + json_string(t.reference)) &&
                                 Contains("\"hypothesis\":" + json_string(t.hypothesis)));
  }
}

TEST_CASE("gpipe_train's JSON strings: escapes, UTF-8 kept, invalid bytes as surrogate escapes") {
  CHECK(json_string("plain") == "\"plain\"");
  CHECK(json_string("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(json_string("tab\tnl\n\x01") == "\"tab\\u0009nl\\u000a\\u0001\"");
  CHECK(json_string("Ústí, Київ, 𝔘") == "\"Ústí, Київ, 𝔘\"");  // valid UTF-8 unchanged
  // Invalid bytes (what a byte-level model can emit): one escape each, as
  // Python's json + surrogateescape read them back.
  CHECK(json_string("\xff") == "\"\\udcff\"");
  CHECK(json_string("ok\xc3") == "\"ok\\udcc3\"");                    // truncated 2-byte sequence
  CHECK(json_string("\xe2\x82x") == "\"\\udce2\\udc82x\"");           // truncated 3-byte sequence
  CHECK(json_string("\xc0\xaf") == "\"\\udcc0\\udcaf\"");             // overlong '/'
  CHECK(json_string("\xed\xa0\x80") == "\"\\udced\\udca0\\udc80\"");  // a surrogate
}

TEST_CASE(
    "gpipe_train --export-data writes the run's batches and initial weights, trains nothing") {
  const std::string dir = temp_path("export");
  const std::vector<std::string> base = with(tiny_transformer(0.1), {"--steps=5"});
  const std::vector<std::string> flags = with(base, {"--seed=7"});
  std::ostringstream log;
  const TrainSummary s =
      train::train(parse_train_flags(with(flags, {"--export-data=" + dir})), log);
  INFO(log.str());
  CHECK(s.losses.empty());
  CHECK(!s.final_eval.has_value());
  CHECK_THAT(log.str(), Contains("exported the data of 5 steps and the initial weights to " + dir));

  std::ifstream in(dir + "/data.json");
  REQUIRE(in.good());
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(json.rfind("{\"format\":\"gpipe-translation-export/1\"", 0) == 0);
  CHECK_THAT(json, Contains("\"languages\":[\"fr\",\"de\"]") && Contains("\"batch\":16,") &&
                       Contains("\"steps\":5,") && Contains("\"max_src_len\":17,") &&
                       Contains("\"dim\":32,") && Contains("\"lr_schedule\":\"cosine:") &&
                       Contains("\"optimizer\":\"Adam\""));
  // Step 0's tokens are the batch this run would train on first.
  const TrainConfig c = parse_train_flags(flags);
  const std::unique_ptr<Task> task = make_task(c);
  const Batch first = task->batch_at(0);
  auto ints = [](const Tensor& t) {
    std::string out;
    for (int64_t v : t.to_vector<int64_t>()) {
      if (!out.empty()) out += ',';
      out += std::to_string(v);
    }
    return "[" + out + "]";
  };
  CHECK_THAT(json, Contains("\"src\":" + ints(first.inputs[0])) &&
                       Contains("\"tgt_in\":" + ints(first.inputs[1])) &&
                       Contains("\"tgt_out\":" + ints(first.targets[0])));
  // One row list per step, 16 rows each; the 4 decoded test rows (--eval-sentences).
  const size_t at = json.find("\"step_rows\":[");
  REQUIRE(at != std::string::npos);
  const std::string rows = json.substr(at);
  CHECK(std::count(rows.begin(), rows.end(), '\n') == 5 + 1);
  CHECK(std::count(rows.begin(), rows.end(), ',') == 5 * 15 + 4);
  const size_t d = json.find("\"decode_rows\":[");
  REQUIRE(d != std::string::npos);
  const std::string decode = json.substr(d, json.find(']', d) - d);
  CHECK(std::count(decode.begin(), decode.end(), ',') == 3);

  // The weights are the run's initial ones: a model of another seed loads them
  // and then equals a freshly built model of this seed, tensor for tensor.
  Model mine = task->make_model();
  Model other = make_task(parse_train_flags(with(base, {"--seed=8"})))->make_model();
  const std::vector<NamedTensor> want = named_state(mine.layers), got = named_state(other.layers);
  REQUIRE(want.size() == got.size());
  CHECK(want[0].tensor->to_vector<float>() != got[0].tensor->to_vector<float>());
  int64_t step = -1;
  optim::load_checkpoint(dir + "/init.safetensors", got, nullptr, &step,
                         {.aliases = {{"src_embed.shared_embedding", "tgt_embed.shared_embedding",
                                       "output.shared_embedding"}}});
  CHECK(step == 0);
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(want[i].name);
    CHECK(want[i].tensor->to_vector<float>() == got[i].tensor->to_vector<float>());
  }
}

TEST_CASE(
    "gpipe_train: a resumed transformer (dropout > 0, K=2, M=2) repeats the uninterrupted losses "
    "bitwise") {
  check_resume_is_exact(tiny_transformer(0.2), "transformer");
}

TEST_CASE(
    "gpipe_train: a resumed AmoebaNet (BatchNorm, K=2, M=2) repeats the uninterrupted losses "
    "bitwise") {
  check_resume_is_exact(with(tiny_amoebanet(), {"--augment", "--lr=0.02"}), "amoebanet");
}

TEST_CASE(
    "gpipe_train: --print-schedule writes a program that --schedule=file: runs; a bad file is "
    "refused") {
  std::ostringstream printed;
  train::train(
      parse_train_flags(with(tiny_transformer(0.0), {"--schedule=1f1b", "--print-schedule"})),
      printed);
  CHECK_THAT(printed.str(), Contains("schedule K=2 M=2 train\n0: F0 >F0 F1 >F1 R0 <B0 B0") &&
                                Contains("# dry run:") &&
                                Contains("peak live micro-batches per stage: 2 1"));
  const std::string path = temp_path("printed.schedule");
  std::ofstream(path) << printed.str();
  std::ostringstream a, b;
  const TrainSummary builtin = train::train(
      parse_train_flags(with(tiny_transformer(0.0), {"--steps=2", "--schedule=1f1b"})), a);
  const TrainSummary loaded = train::train(
      parse_train_flags(with(tiny_transformer(0.0), {"--steps=2", "--schedule=file:" + path})), b);
  REQUIRE(loaded.losses.size() == 2);
  CHECK(loaded.losses == builtin.losses);  // the same program, the same arithmetic
  // A hand-edited file with a backward missing is refused before anything runs, naming the flag.
  std::string text = printed.str();
  text.replace(text.find(" B0 >B0"), 7, "");
  std::ofstream(path) << text;
  std::ostringstream c;
  CHECK_THROWS_WITH(
      train::train(parse_train_flags(with(tiny_transformer(0.0), {"--schedule=file:" + path})), c),
      Contains("--schedule") &&
          Contains("stage 1: reduce_replicas before the backward of micro-batch 0") &&
          Contains("[reduce_replicas]"));
}

TEST_CASE(
    "gpipe_train: an interleaved program printed and loaded again runs alike; its cells and "
    "devices must match --K and --virtual") {
  const std::vector<std::string> flags = {"--schedule=interleaved", "--virtual=2"};
  std::ostringstream printed;
  train::train(
      parse_train_flags(with(tiny_transformer(0.0), {flags[0], flags[1], "--print-schedule"})),
      printed);
  CHECK_THAT(printed.str(), Contains("schedule K=4 M=2 train devices=2\n") &&
                                Contains("(interleaved's formula (K-1)/(vM+K-1), v=2") &&
                                Contains("# device 1 |"));
  const std::string path = temp_path("interleaved.schedule");
  std::ofstream(path) << printed.str();
  std::ostringstream a, b;
  const TrainSummary builtin = train::train(
      parse_train_flags(with(tiny_transformer(0.0), {"--steps=2", flags[0], flags[1]})), a);
  const TrainSummary loaded =
      train::train(parse_train_flags(with(tiny_transformer(0.0),
                                          {"--steps=2", "--virtual=2", "--schedule=file:" + path})),
                   b);
  REQUIRE(loaded.losses.size() == 2);
  CHECK(loaded.losses == builtin.losses);
  CHECK_THAT(a.str(), Contains("bubble") && Contains("(K-1)/(vM+K-1), v=2") &&
                          Contains("K=2 devices, 4 cells"));
  std::ostringstream c;
  CHECK_THROWS_WITH(
      train::train(parse_train_flags(with(tiny_transformer(0.0), {"--schedule=file:" + path})), c),
      Contains("the program has 4 cells on 2 devices but --K=2 --virtual=1") &&
          Contains("run it with --K=2 --virtual=2"));
}

TEST_CASE("gpipe_train: a truncated or mismatched checkpoint is a clear error") {
  const std::string path = temp_path("small.safetensors");
  std::ostringstream log;
  TrainConfig c = parse_train_flags(with(tiny_transformer(0.0), {"--steps=1", "--save=" + path}));
  c.final_eval = false;
  train::train(c, log);

  // Truncated: half the file.
  const std::string cut = temp_path("truncated.safetensors");
  {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  TrainConfig r = parse_train_flags(with(tiny_transformer(0.0), {"--steps=2", "--resume=" + cut}));
  r.final_eval = false;
  try {
    train::train(r, log);
    FAIL("no error");
  } catch (const UsageError&) {
    FAIL("a corrupt file is not a usage error");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Contains(cut) && Contains("truncated"));
  }

  // Another model config: the loader lists the mismatched shapes.
  TrainConfig wide =
      parse_train_flags({"--model=transformer", "--layers=1", "--ffn=128", "--heads=2", "--dim=32",
                         "--languages=fr,de", "--max-len=16", "--train-limit=512", "--batch=16",
                         "--K=2", "--M=2", "--steps=2", "--resume=" + path});
  wide.final_eval = false;
  CHECK_THROWS_WITH(train::train(wide, log),
                    Contains(path) && Contains("shape") && Contains("128"));

  // A missing file.
  r.resume = temp_path("does-not-exist.safetensors");
  CHECK_THROWS_WITH(train::train(r, log), Contains("does-not-exist.safetensors"));
}

TEST_CASE(
    "gpipe_train --precision=fp16: overflowing steps are skipped while the loss scale backs off, "
    "then it trains") {
  std::ostringstream log;
  TrainConfig c = parse_train_flags(
      with(tiny_transformer(0.0), {"--steps=12", "--precision=fp16", "--loss-scale=dynamic:1e9"}));
  c.final_eval = false;
  const TrainSummary s = train::train(c, log);
  INFO(log.str());
  // 1e9 halves to 1e6 or below within about ten steps; the tiny model's float16
  // gradients overflow above about 2e6.
  CHECK(s.skipped_steps >= 5);
  CHECK(s.skipped_steps < 12);
  CHECK_THAT(log.str(), Contains("precision fp16, dynamic loss scale from 1e+09") &&
                            Contains("the gradients overflowed at loss scale 1e+09; loss scale "
                                     "now 5e+08"));
  for (double l : s.losses) CHECK(std::isfinite(l));
}

TEST_CASE("gpipe_train: bf16 and fp16 runs resume bitwise, the loss scale from the checkpoint") {
  check_resume_is_exact(with(tiny_transformer(0.2), {"--precision=bf16"}), "bf16");
  // From 2e6 the first step overflows and the scale halves: the resumed run
  // must go on from the checkpoint's scale, not the flag's.
  check_resume_is_exact(
      with(tiny_transformer(0.2), {"--precision=fp16", "--loss-scale=dynamic:2e6"}), "fp16");
}

TEST_CASE("gpipe_train: steps with a non-finite loss are skipped and counted, not fatal") {
  std::ostringstream log;
  TrainConfig c = parse_train_flags(
      with(tiny_amoebanet(), {"--steps=3", "--lr=1e30", "--lr-schedule=constant"}));
  c.final_eval = false;
  const TrainSummary s = train::train(c, log);
  INFO(log.str());
  REQUIRE(s.losses.size() == 3);
  CHECK(std::isfinite(s.losses[0]));
  CHECK(s.skipped_steps == 2);
  CHECK_THAT(log.str(), Contains("warning: step 2 skipped") && Contains("2 steps skipped"));
}

TEST_CASE(
    "gpipe_train --plan=auto: the planner's choice fits --memory and trains as the same flags "
    "given by hand; --balance-by=plan cuts for the given schedule") {
  std::vector<std::string> base = tiny_transformer(0.0);
  base.erase(std::find(base.begin(), base.end(), "--M=2"));
  std::ostringstream log;
  const TrainSummary planned = train::train(
      parse_train_flags(with(base, {"--steps=2", "--plan=auto", "--memory=64MB"})), log);
  REQUIRE(planned.losses.size() == 2);
  const std::string text = log.str();
  CHECK_THAT(text, Contains("plan: profiled on cpu:0 at micro-batches of 1, 2, 4, 8, 16") &&
                       Contains("rank  plan") && Contains(": predicted step "));
  // "plan: <schedule> M=<m> [v=<v>] remat=<mode> cells=<a,b,...>: predicted step ..."
  const size_t at = text.find("plan: ", text.find("rank  plan"));
  std::istringstream line(text.substr(at + 6, text.find(':', at + 6) - at - 6));
  std::string schedule, m, v, remat, cells;
  line >> schedule >> m >> v;
  if (v.rfind("v=", 0) == 0)
    line >> remat >> cells;
  else
    remat = v, line >> cells, v.clear();
  INFO(text.substr(at, 120));
  REQUIRE(m.rfind("M=", 0) == 0);
  REQUIRE(cells.rfind("cells=", 0) == 0);
  if (remat.find(',') == std::string::npos) {  // one mode for every cell: flags can say it
    std::vector<std::string> by_hand =
        with(base, {"--steps=2", "--schedule=" + schedule, "--M=" + m.substr(2), "--" + remat,
                    "--balance=" + cells.substr(6)});
    if (!v.empty() && schedule != "zb-v") by_hand.push_back("--virtual=" + v.substr(2));
    std::ostringstream again;
    const TrainSummary manual = train::train(parse_train_flags(by_hand), again);
    REQUIRE(manual.losses.size() == 2);
    for (int i = 0; i < 2; ++i) CHECK(manual.losses[i] == Approx(planned.losses[i]).epsilon(1e-5));
  }
  std::ostringstream cut;
  train::train(parse_train_flags(with(base, {"--steps=1", "--M=2", "--balance-by=plan"})), cut);
  CHECK_THAT(cut.str(),
             Contains("plan: gpipe M=2 remat=except_last cells=") && Contains(": predicted step "));
  std::ostringstream small;
  CHECK_THROWS_WITH(
      train::train(parse_train_flags(with(base, {"--plan=auto", "--memory=10kB"})), small),
      Contains("below one device's share of the parameters"));
}
