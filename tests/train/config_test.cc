// gpipe_train's flag handling, through parse_train_flags (what main calls):
// every flag it cannot honour is a UsageError naming the flag and what it
// accepts; --print-params counts without allocating.
#include "tools/train/config.h"

#include <catch2/catch.hpp>
#include <sstream>

#include "models/amoebanet.h"
#include "models/transformer.h"
#include "tools/train/cli_checks.h"
#include "tools/train/trainer.h"

using namespace gpipe;
using namespace gpipe::train;
using Catch::Contains;

namespace {

std::string usage_error(std::vector<std::string> args) {
  try {
    parse_train_flags(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  FAIL("no UsageError for the arguments");
  return "";
}

}  // namespace

TEST_CASE("gpipe_train flags: a good command line parses") {
  const TrainConfig c = parse_train_flags(
      {"--model=transformer", "--K=2", "--M=4", "--steps=200", "--languages=fr,de", "--lr=1e-3",
       "--layers=1", "--balance=4,4", "--devices=cpu:0,cpu:1", "--schedule=1f1b"});
  CHECK(c.model == "transformer");
  CHECK(c.K == 2);
  CHECK(c.M == 4);
  CHECK(c.steps == 200);
  CHECK(c.languages == std::vector<std::string>{"fr", "de"});
  REQUIRE(c.lr.has_value());
  CHECK(*c.lr == 1e-3);
  CHECK_FALSE(c.momentum.has_value());
  const TrainConfig r = resolve_defaults(c, 100);
  CHECK(r.optimizer == "adam");
  CHECK(r.batch == 32);
  CHECK(r.lr_schedule == "cosine:total=200,warmup=20");

  const TrainConfig a =
      resolve_defaults(parse_train_flags({"--model=amoebanet", "--epochs=2"}), 468);
  CHECK(a.steps == 936);
  CHECK(a.optimizer == "sgd");
  CHECK(a.momentum.value_or(0) == 0.9);
}

TEST_CASE("gpipe_train flags: label smoothing and the small-input stem") {
  // Label smoothing: 0.1 for the transformer, off for the image models, unless given.
  CHECK(resolve_defaults(parse_train_flags({"--model=transformer"}), 100).label_smoothing == 0.1);
  CHECK(resolve_defaults(parse_train_flags({"--model=amoebanet"}), 100).label_smoothing == 0.0);
  CHECK(resolve_defaults(parse_train_flags({"--model=resnet", "--label-smoothing=0.05"}), 100)
            .label_smoothing == 0.05);
  CHECK_THAT(usage_error({"--model=amoebanet", "--label-smoothing=1.5"}),
             Contains("--label-smoothing"));

  // --stem=small: the cells of the small-input layout (3N + 4 layers) bound K.
  const TrainConfig s = parse_train_flags({"--model=amoebanet", "--stem=small", "--K=4"});
  CHECK(s.stem == "small");
  CHECK(model_layer_count(s) == 7);
  CHECK_THAT(usage_error({"--model=amoebanet", "--stem=small", "--K=8", "--normal-cells=1"}),
             Contains("7 layers") && Contains("3N+4") && Contains("--normal-cells=2 or more"));
  CHECK_THAT(usage_error({"--model=amoebanet", "--stem=tiny"}), Contains("--stem"));
  CHECK(parse_train_flags({"--model=amoebanet", "--stem=small", "--image-size=28"}).image_size ==
        28);
  CHECK_THAT(usage_error({"--model=amoebanet", "--image-size=28"}),
             Contains("--image-size=28: only AmoebaNet's small-input layout (--stem=small)"));
  CHECK_THAT(usage_error({"--model=resnet", "--image-size=30"}),
             Contains("--image-size: expected 28, 32 or a multiple of 32, got 30"));
  CHECK_THAT(usage_error({"--model=resnet", "--stem=small"}),
             Contains("--stem: applies to --model=amoebanet, amoebanet-b only"));
}

TEST_CASE("gpipe_train flags: --export-data is the translation task's, from a run's start") {
  CHECK(parse_train_flags({"--model=transformer", "--export-data=/tmp/x"}).export_data == "/tmp/x");
  CHECK_THAT(usage_error({"--model=amoebanet", "--export-data=/tmp/x"}),
             Contains("--export-data") && Contains("--model=amoebanet") &&
                 Contains("--model=transformer"));
  CHECK_THAT(usage_error({"--model=transformer", "--export-data=/tmp/x", "--resume=a.ckpt"}),
             Contains("--export-data") && Contains("drop --resume"));
  CHECK_THAT(usage_error({"--model=transformer", "--export-data=/tmp/x", "--replicas=2"}),
             Contains("--export-data: runs in one process"));
  // It trains nothing: the training run's output files are not touched.
  CHECK_THAT(usage_error({"--model=transformer", "--export-data=/tmp/x", "--metrics=m.jsonl"}),
             Contains("--export-data: trains nothing, so it writes no --metrics file"));
  CHECK_THAT(usage_error({"--model=transformer", "--export-data=/tmp/x", "--save=c.safetensors"}),
             Contains("drop --save"));
}

TEST_CASE("gpipe_train flags: the design card's commands run as typed, with a default budget") {
  for (const char* model : {"--model=transformer", "--model=amoebanet"}) {
    INFO(model);
    for (const char* k : {"--K=8", "--K=9"}) {
      const TrainConfig c = parse_train_flags({model, k, "--M=32"});
      CHECK(c.K <= model_layer_count(c));
    }
  }
  // The default Transformer can be cut into 32 cells.
  CHECK(model_layer_count(parse_train_flags({"--model=transformer", "--K=32", "--M=32"})) >= 32);
  const TrainConfig t =
      resolve_defaults(parse_train_flags({"--model=transformer", "--K=8", "--M=32"}), 100);
  CHECK(t.steps == 600);
  const TrainConfig a =
      resolve_defaults(parse_train_flags({"--model=amoebanet", "--K=8", "--M=32"}), 468);
  CHECK(a.epochs == 2);
  CHECK(a.steps == 2 * 468);
  // The budget is stated in --help.
  try {
    parse_train_flags({"--help"});
    FAIL("no HelpRequested");
  } catch (const HelpRequested& h) {
    CHECK_THAT(h.text, Contains("--steps=600") && Contains("--epochs=2"));
  }
}

TEST_CASE("gpipe_train flags: errors come in the order a user reads the command") {
  // An unknown flag is named before a missing required one.
  CHECK_THAT(usage_error({"--no-such-flag"}), Contains("--no-such-flag"));
  CHECK_THAT(usage_error({"--K=2", "--no-such-flag"}), Contains("--no-such-flag"));
  CHECK_THAT(usage_error({"--model=transformer", "--no-such-flag"}), Contains("--no-such-flag"));
  // With nothing unknown, the missing --model, also before a model-specific flag.
  CHECK_THAT(usage_error({"--K=2"}), Contains("--model is required"));
  CHECK_THAT(usage_error({"--layers=4"}), Contains("--model is required"));
  CHECK_THAT(usage_error({"--normal-cells=2"}), Contains("--model is required"));
}

TEST_CASE("gpipe_train flags: usage errors name the flag and the accepted values") {
  CHECK_THAT(usage_error({"--steps=10"}), Contains("--model") && Contains("required"));
  CHECK_THAT(usage_error({"--model=transformer", "--precision=fp8"}),
             Contains("--precision: unknown precision 'fp8': expected fp32, bf16 or fp16"));
  CHECK_THAT(usage_error({"--model=transformer", "--precision=fp16", "--loss-scale=-3"}),
             Contains("--loss-scale: expected auto, dynamic, dynamic:INITIAL, none or a positive "
                      "number, got '-3'"));
  CHECK_THAT(usage_error({"--model=transformer", "--loss-scale=dynamic:x"}),
             Contains("--loss-scale") && Contains("got 'dynamic:x'"));
  CHECK_THAT(usage_error({"--model=gpt", "--steps=10"}),
             Contains("--model") && Contains("transformer") && Contains("amoebanet"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--epochs=1"}),
             Contains("--steps") && Contains("--epochs"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--batch=4", "--M=8"}),
             Contains("--M") && Contains("batch"));
  // K beyond the layers there are to cut: the message names the flag that makes the model deeper.
  CHECK(parse_train_flags({"--model=transformer", "--K=8", "--layers=1"}).K == 8);
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--K=9", "--layers=1"}),
             Contains("only 8 layers") && Contains("--layers=2 or more for K=9"));
  CHECK_THAT(usage_error({"--model=transformer", "--K=34"}),
             Contains("only 33 layers") && Contains("--layers=7 or more"));
  CHECK_THAT(usage_error({"--model=transformer", "--preset=T(6,8192,16)", "--K=34"}),
             Contains("only 33 layers") && Contains("the preset fixes L"));
  CHECK_THAT(
      usage_error({"--model=amoebanet", "--steps=10", "--K=12", "--normal-cells=1"}),
      Contains("--K") && Contains("9 layers") && Contains("--normal-cells=2 or more for K=12"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--K=0"}), Contains("--K"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--schedule=zigzag"}),
             Contains("--schedule") && Contains("gpipe") && Contains("1f1b"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--remat=sometimes"}),
             Contains("--remat") && Contains("except_last"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--balance-by=luck"}),
             Contains("--balance-by") && Contains("memory"));
  CHECK_THAT(
      usage_error({"--model=transformer", "--steps=10", "--layers=1", "--K=2", "--balance=3,3"}),
      Contains("--balance") && Contains("sum to 6") && Contains("8 layers"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--balance=3,x"}),
             Contains("--balance"));
  CHECK_THAT(
      usage_error({"--model=transformer", "--steps=10", "--balance=4,3", "--balance-by=time"}),
      Contains("--balance") && Contains("--balance-by"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--K=2", "--devices=tpu:0"}),
             Contains("--devices"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--K=3", "--devices=2"}),
             Contains("--devices=2") && Contains("--K"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--partitions=2"}),
             Contains("--partitions was renamed: use --K"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--micro-batches=2"}),
             Contains("--micro-batches was renamed: use --M"));
  CHECK_THAT(
      usage_error({"--model=transformer", "--steps=10", "--K=2", "--devices=cpu:0,cpu:1,cpu:2"}),
      Contains("--devices: got 3 devices for --K=2"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--optimizer=lion"}),
             Contains("--optimizer") && Contains("adam") && Contains("rmsprop"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--momentum=0.9"}),
             Contains("--momentum") && Contains("sgd or rmsprop"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--lr-schedule=wavy"}),
             Contains("--lr-schedule") && Contains("cosine"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--preset=T(1,2,3)"}),
             Contains("--preset") && Contains("T(6,8192,16)"));
  CHECK_THAT(
      usage_error({"--model=transformer", "--steps=10", "--preset=T(6,8192,16)", "--layers=3"}),
      Contains("--preset") && Contains("--layers"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--heads=3", "--dim=128"}),
             Contains("--dim") && Contains("--heads"));
  CHECK_THAT(usage_error({"--model=amoebanet", "--steps=10", "--dropout=0.1"}),
             Contains("--dropout") && Contains("--model=transformer, gpt2, llama only"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--filters=64"}),
             Contains("--filters") && Contains("--model=amoebanet, amoebanet-b only"));
  // The zoo's own flags belong to their models; shared image flags to all image models.
  CHECK_THAT(
      usage_error({"--model=unet", "--steps=10", "--filters=64"}),
      Contains("--filters: applies to --model=amoebanet, amoebanet-b only, not --model=unet"));
  CHECK_THAT(usage_error({"--model=amoebanet", "--steps=10", "--split-blocks"}),
             Contains("--split-blocks: applies to --model=resnet only"));
  CHECK_THAT(usage_error({"--model=resnet", "--steps=10", "--unet-depth=3"}),
             Contains("--unet-depth: applies to --model=unet only"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--augment"}),
             Contains("--augment: applies to --model=amoebanet, amoebanet-b, resnet, unet only"));
  CHECK_THAT(usage_error({"--model=resnet", "--steps=10", "--resnet-depth=34"}),
             Contains("--resnet-depth: expected 50, 101 or 152, got 34"));
  CHECK_THAT(usage_error({"--model=unet", "--steps=10", "--unet-depth=6"}),
             Contains("--unet-depth: expected B >= 1 with --image-size (32) a multiple of 2^B"));
  CHECK_THAT(usage_error({"--model=unet", "--steps=10", "--unet-channels=5"}),
             Contains("--unet-channels: expected an even C"));
  CHECK_THAT(usage_error({"--model=unet", "--steps=10", "--skips=portals"}),
             Contains("--skips") && Contains("direct"));
  CHECK_THAT(usage_error({"--model=resnet", "--steps=10", "--K=40"}),
             Contains("--split-blocks gives three layers per block"));
  CHECK_THAT(usage_error({"--model=unet", "--steps=10", "--K=11"}),
             Contains("--unet-depth=B gives 2B+2 layers"));
  CHECK(parse_train_flags({"--model=resnet", "--steps=1", "--split-blocks", "--K=40"}).K == 40);
  CHECK(parse_train_flags({"--model=amoebanet-b", "--steps=1"}).optimizer.empty());
  CHECK_THAT(usage_error({"--model=amoebanet", "--steps=10", "--filters=12"}),
             Contains("--filters") && Contains("multiple of 8"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--save-every=5"}),
             Contains("--save-every") && Contains("--save"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--max-len=1000"}),
             Contains("--max-len"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=10", "--bogus"}), Contains("--bogus"));
}

TEST_CASE("gpipe_train flags: schedules with several cells per device") {
  const std::vector<std::string> t = {"--model=transformer", "--steps=1", "--K=2", "--M=4"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = t;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  CHECK(parse_train_flags(with({"--schedule=zb-v"})).virtual_stages == 2);
  CHECK(parse_train_flags(with({"--schedule=interleaved", "--virtual=3"})).virtual_stages == 3);
  CHECK(parse_train_flags(with({"--schedule=interleaved-1f1b", "--virtual=2"})).virtual_stages ==
        2);
  CHECK_THROWS_WITH(parse_train_flags(with({"--schedule=zb-v", "--virtual=1"})),
                    Contains("zb-v holds exactly 2 cells per device"));
  CHECK_THROWS_WITH(parse_train_flags(with({"--schedule=zb-v", "--virtual=3"})),
                    Contains("zb-v holds exactly 2 cells per device"));
  CHECK_THROWS_WITH(
      parse_train_flags(with({"--schedule=1f1b", "--virtual=2"})),
      Contains(
          "--virtual=2 cells per device needs the interleaved schedule (--schedule=interleaved"));
  // Interleaving takes any M; the other V schedules imply 2 cells per device; dualpipev M >= 2K.
  CHECK(parse_train_flags({"--model=transformer", "--steps=1", "--K=2", "--M=3",
                           "--schedule=interleaved", "--virtual=2"})
            .virtual_stages == 2);
  for (const char* v : {"--schedule=v-half", "--schedule=v-min", "--schedule=dualpipev"})
    CHECK(parse_train_flags(with({v})).virtual_stages == 2);
  CHECK(parse_train_flags(with({"--schedule=zb-interleaved", "--virtual=3"})).virtual_stages == 3);
  CHECK(parse_train_flags(with({"--schedule=looped-bfs", "--virtual=2"})).virtual_stages == 2);
  CHECK_THROWS_WITH(parse_train_flags(with({"--schedule=gpipe", "--virtual=2"})),
                    Contains("GPipe's order over v cells per device is --schedule=looped-bfs"));
  CHECK_THROWS_WITH(parse_train_flags(with({"--schedule=v-min", "--virtual=1"})),
                    Contains("v-min holds exactly 2 cells per device"));
  CHECK_THROWS_WITH(parse_train_flags({"--model=transformer", "--steps=1", "--K=2", "--M=3",
                                       "--schedule=dualpipev"}),
                    Contains("dualpipev needs M >= 2K"));
  CHECK(parse_train_flags(with({"--schedule=zb-v", "--order-latency=0.5"})).order_latency == 0.5);
  // No --order-latency: the link is measured at start-up; an explicit 0 means free links.
  const PipelineOptions measured = pipeline_options(parse_train_flags(with({"--schedule=zb-v"})));
  CHECK(measured.measure_link_latency);
  CHECK(measured.order_costs.link_latency == 0);
  const PipelineOptions free_links =
      pipeline_options(parse_train_flags(with({"--schedule=zb-v", "--order-latency=0"})));
  CHECK_FALSE(free_links.measure_link_latency);
  CHECK(free_links.order_costs.link_latency == 0);
}

TEST_CASE("gpipe_train flags: --help is not an error") {
  try {
    parse_train_flags({"--help"});
    FAIL("no HelpRequested");
  } catch (const HelpRequested& h) {
    CHECK_THAT(h.text,
               Contains("--model") && Contains("--balance-by") && Contains("Per-model defaults"));
  }
}

TEST_CASE(
    "gpipe_train --print-params: the formula's count for the paper presets, nothing allocated") {
  for (const char* preset : {"T(6,8192,16)", "T(64,16384,32)"}) {
    std::ostringstream log;
    const TrainSummary s = train::train(parse_train_flags({"--model=transformer", "--print-params",
                                                           std::string("--preset=") + preset}),
                                        log);
    CHECK(s.parameters == models::transformer_parameter_count(models::transformer_preset(preset)));
    CHECK_THAT(log.str(), Contains(preset) && Contains("vocab=32000"));
  }
  std::ostringstream log;
  const TrainSummary a = train::train(parse_train_flags({"--model=amoebanet", "--print-params",
                                                         "--normal-cells=6", "--filters=208"}),
                                      log);
  models::AmoebaNetConfig ac;
  ac.num_normal_cells = 6;
  ac.filters = 208;
  ac.in_channels = 1;
  CHECK(a.parameters == models::amoebanet_parameter_count(ac));
  CHECK_THAT(log.str(), Contains("AmoebaNet-D(N=6, F=208)"));
}

TEST_CASE("gpipe_train: a missing data directory is a runtime error naming it") {
  TrainConfig c =
      parse_train_flags({"--model=amoebanet", "--steps=1", "--data-dir=/nonexistent/fmnist"});
  std::ostringstream log;
  try {
    train::train(c, log);
    FAIL("no error");
  } catch (const UsageError&) {
    FAIL("a missing directory is not a usage error");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Contains("--data-dir") && Contains("/nonexistent/fmnist"));
  }
  c = parse_train_flags({"--model=transformer", "--steps=1", "--data-dir=/nonexistent/locale"});
  CHECK_THROWS_WITH(train::train(c, log), Contains("/nonexistent/locale"));
}

TEST_CASE("gpipe_train flags: processes and replicas") {
  const TrainConfig c =
      parse_train_flags({"--model=transformer", "--K=2", "--M=4", "--steps=10", "--replicas=2",
                         "--layout=stage", "--no-sync-bn", "--timeout=30", "--watchdog=5"});
  CHECK(c.replicas == 2);
  CHECK(c.layout == "stage");
  CHECK_FALSE(c.sync_batchnorm);
  CHECK(c.timeout == 30);
  CHECK(c.watchdog == 5);
  CHECK(parse_train_flags({"--model=transformer", "--steps=1"}).sync_batchnorm);
  CHECK_THAT(usage_error({"--model=transformer", "--steps=1", "--replicas=0"}),
             Contains("--replicas"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=1", "--layout=ring"}),
             Contains("--layout"));
  CHECK_THAT(
      usage_error({"--model=transformer", "--steps=1", "--batch=8", "--M=4", "--replicas=4"}),
      Contains("R x M = 16") && Contains("--batch >= R x M"));
  CHECK_THAT(usage_error({"--model=transformer", "--steps=1", "--timeout=0"}),
             Contains("--timeout"));
}

TEST_CASE("gpipe_train: replicas in one process are a usage error naming the launch") {
  std::ostringstream log;
  TrainConfig c = parse_train_flags(
      {"--model=transformer", "--K=2", "--M=2", "--steps=1", "--replicas=2", "--batch=8"});
  CHECK_THROWS_WITH(gpipe::train::train(c, log), Contains("launch with mpirun -np 4"));
}

TEST_CASE("gpipe_train flags: the canonical form ignores order and spelling, not values") {
  const std::string a = canonical_flags({"--model=transformer", "--K=2", "--M=4", "--steps=10"});
  CHECK(a == canonical_flags({"--steps", "10", "--M=4", "--model", "transformer", "--K", "2"}));
  CHECK(a != canonical_flags({"--model=transformer", "--K=2", "--M=4", "--steps=11"}));
  CHECK_THROWS_AS(canonical_flags({"--model=transformer", "--steps=1", "--K=0"}), UsageError);
}

TEST_CASE("gpipe_train flags: --plan=auto chooses what it plans; --memory needs a planner") {
  const std::vector<std::string> t = {"--model=transformer", "--steps=1", "--K=2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = t;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const TrainConfig c = parse_train_flags(with({"--plan=auto", "--memory=16GB"}));
  CHECK(c.plan == "auto");
  CHECK(c.memory == "16GB");
  CHECK(parse_train_flags(with({"--balance-by=plan", "--memory=1GiB"})).balance_by == "plan");
  for (const char* f : {"--M=4", "--schedule=1f1b", "--remat=never", "--balance=17,16",
                        "--balance-by=time", "--virtual=2"})
    CHECK_THROWS_WITH(parse_train_flags(with({"--plan=auto", f})),
                      Contains("--plan=auto and --") && Contains("the planner chooses M"));
  CHECK_THROWS_WITH(parse_train_flags(with({"--memory=16GB"})),
                    Contains("--memory: applies to --plan=auto or --balance-by=plan only"));
  CHECK_THROWS_WITH(parse_train_flags(with({"--plan=auto", "--memory=lots"})),
                    Contains("--memory") && Contains("'lots' is not a memory size"));
  CHECK_THROWS_WITH(parse_train_flags(with({"--plan=manual"})), Contains("--plan"));
}

namespace {
// app's message for the one argument `arg`, or "" when it parses.
std::string parse_error(CLI::App& app, const std::string& arg) {
  std::vector<std::string> args = {arg};
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("tool flags: a whole-number range names the range and the text given") {
  CLI::App app("t");
  int k = 2;
  app.add_option("--K", k)->check(gpipe::train::int_range(1, 16));
  auto parse = [&](const std::string& value) { return parse_error(app, "--K=" + value); };
  CHECK(parse("4").empty());
  CHECK(k == 4);
  CHECK(parse("16").empty());
  for (const std::string bad : {"0", "17", "x", "4x", "-1", "99999999999999999999"})
    CHECK(parse(bad) == "--K: expected a whole number from 1 to 16, got '" + bad + "'");
}

TEST_CASE("tool flags: a dropout rate is a probability in [0, 1)") {
  CLI::App app("t");
  double p = 0.5;
  app.add_option("--dropout", p)->check(gpipe::train::kProbability);
  auto parse = [&](const std::string& value) { return parse_error(app, "--dropout=" + value); };
  CHECK(parse("0").empty());
  CHECK(p == 0.0);
  CHECK(parse("0.1").empty());
  CHECK(p == 0.1);
  for (const std::string bad : {"1", "1.5", "-0.1", "x", "0.1x", "nan"})
    CHECK(parse(bad) == "--dropout: expected a probability in [0, 1), got '" + bad + "'");
}

TEST_CASE("gpipe_train flags: the language models' own data") {
  const TrainConfig c = parse_train_flags({"--model=gpt2", "--data=a.txt,b/", "--data", "c.jsonl",
                                           "--doc-split=blank", "--text-field=body", "--doc-mask",
                                           "--val-fraction=0.1"});
  CHECK(c.data == std::vector<std::string>{"a.txt", "b/", "c.jsonl"});
  CHECK(c.doc_split == "blank");
  CHECK(c.text_field == "body");
  CHECK(c.doc_mask);
  CHECK(c.val_fraction == 0.1);
  CHECK(parse_train_flags({"--model=llama", "--val-data=v.bin"}).val_data == "v.bin");
  CHECK_THAT(usage_error({"--model=gpt2", "--val-data=v.txt", "--val-fraction=0.1"}),
             Contains("--val-data and --val-fraction"));
  CHECK_THAT(usage_error({"--model=gpt2", "--doc-split=para"}),
             Contains("--doc-split") && Contains("file"));
  CHECK_THAT(usage_error({"--model=gpt2", "--val-fraction=1"}), Contains("--val-fraction"));
  CHECK_THAT(usage_error({"--model=llama", "--data=a.txt", "--data-dir=/tmp"}),
             Contains("--data-dir: names a folder of fortune files"));
  CHECK_THAT(usage_error({"--model=transformer", "--doc-mask"}),
             Contains("--doc-mask: applies to --model=gpt2, llama only"));
}
