// gpipe_train's flag values checked (validate) and turned into what the run
// uses: the model's layer count, the defaults per model (resolve_defaults),
// the loss scale, and the pipeline's options, resolved once with the flags'
// names (pipeline_options, resolve_pipeline). The flags themselves and their
// parsing are flags.cc's.
#include "tools/train/config.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

#include "core/device.h"
#include "core/precision.h"
#include "models/amoebanet.h"
#include "models/lm.h"
#include "models/resnet.h"
#include "models/transformer.h"
#include "models/unet.h"
#include "optim/lr_schedule.h"
#include "pipeline/partition.h"
#include "pipeline/pipeline.h"
#include "pipeline/plan.h"
#include "pipeline/remat.h"
#include "pipeline/schedule.h"
#include "tools/train/cli_checks.h"
#include "tools/train/flag_checks.h"
#include "tools/train/hf_io.h"

namespace gpipe::train {

bool image_model(const std::string& model) {
  return model == "amoebanet" || model == "amoebanet-b" || model == "resnet" || model == "unet";
}

bool lm_model(const std::string& model) { return model == "gpt2" || model == "llama"; }

// --init-from: the folder's config, with every size flag given checked against it.
static models::LmConfig lm_config_from_folder(const TrainConfig& c) {
  models::LmConfig m = read_hf_config(c.init_from);
  usage(c.preset.empty(), "--preset and --init-from: the folder's config.json fixes the size");
  const std::string where = "'" + c.init_from + "/config.json'";
  for (const auto& [flag, given, has] :
       {std::tuple{"--layers", c.layers, m.layers}, std::tuple{"--dim", c.dim, m.dim},
        std::tuple{"--heads", c.heads, m.heads}, std::tuple{"--kv-heads", c.kv_heads, m.kv()},
        std::tuple{"--ffn", c.ffn, m.ffn}, std::tuple{"--vocab", c.vocab, m.vocab}})
    usage(given == 0 || given == has, flag, "=", given, " contradicts ", where, ", which has ",
          has);
  m.dropout = c.dropout;
  return m;
}

models::LmConfig lm_config(const TrainConfig& c, int64_t tokenizer_vocab) {
  if (!c.init_from.empty()) return lm_config_from_folder(c);
  models::LmConfig m = c.preset.empty() ? models::lm_default(c.model) : models::lm_preset(c.preset);
  if (c.preset.empty()) {
    if (c.dim > 0) {
      m.dim = c.dim;
      m.ffn = c.model == "gpt2" ? 4 * c.dim : 3 * c.dim;
    }
    if (c.layers > 0) m.layers = c.layers;
    if (c.heads > 0) {
      m.heads = c.heads;
      m.kv_heads = c.model == "llama" && c.heads % 2 == 0 ? c.heads / 2 : 0;
    }
    if (c.ffn > 0) m.ffn = c.ffn;
    if (c.kv_heads > 0) m.kv_heads = c.kv_heads;
    if (c.context > 0) m.context = c.context;
  }
  m.vocab = c.vocab > 0 ? c.vocab : tokenizer_vocab > 0 ? tokenizer_vocab : 257;
  m.dropout = c.dropout;
  return m;
}

double label_smoothing_of(const TrainConfig& c) {
  return c.label_smoothing.value_or(c.model == "transformer" ? 0.1 : 0.0);
}

namespace {
// The model's depth flag set to `depth` (--layers or --normal-cells); a preset fixes L.
int64_t layer_count_at_depth(const TrainConfig& c, int64_t depth) {
  if (c.model == "transformer") {
    models::TransformerConfig t;
    t.layers = depth;
    return models::transformer_layer_count(t);
  }
  models::AmoebaNetConfig a;
  a.num_normal_cells = depth;
  a.small_input = c.stem == "small";
  return models::amoebanet_layer_count(a);
}
}  // namespace

int64_t model_layer_count(const TrainConfig& c) {
  if (lm_model(c.model)) return models::lm_layer_count(lm_config(c));
  if (c.model == "transformer")
    return layer_count_at_depth(
        c, c.preset.empty() ? c.layers : models::transformer_preset(c.preset).layers);
  // validate_model has checked the sizes by the time validate_pipeline asks.
  if (c.model == "resnet")
    return models::resnet_layer_count({.depth = c.resnet_depth, .split_blocks = c.split_blocks});
  if (c.model == "unet") return models::unet_layer_count({.depth = c.unet_depth});
  return layer_count_at_depth(c, c.normal_cells);
}

static std::string deeper_model_hint(const TrainConfig& c, int64_t k) {
  if (lm_model(c.model))
    return c.preset.empty()
               ? detail::concat("--layers=L gives 2L+2 layers: --layers=",
                                std::max<int64_t>(1, (k - 1) / 2), " or more for K=", k)
               : "the preset fixes L; a deeper preset, or explicit sizes";
  if (c.model == "resnet")
    return "--split-blocks gives three layers per block; --resnet-depth=101 or 152 more blocks";
  if (c.model == "unet") return "--unet-depth=B gives 2B+2 layers";
  if (c.model == "transformer" && !c.preset.empty())
    return detail::concat(
        "the preset fixes L; a deeper preset, or explicit sizes with --layers=L (5L+3 layers) "
        "instead of --preset");
  const bool transformer = c.model == "transformer";
  int64_t depth = transformer ? 1 : 0;  // the smallest depth whose layer list has K layers
  while (layer_count_at_depth(c, depth) < k) ++depth;
  return transformer ? detail::concat("--layers=L gives 5L+3 layers: --layers=", depth,
                                      " or more for K=", k)
                     : detail::concat("--normal-cells=N gives 3N+", layer_count_at_depth(c, 0),
                                      " layers: --normal-cells=", depth, " or more for K=", k);
}

int64_t default_batch(const std::string& model) { return image_model(model) ? 128 : 32; }

static void validate_lm(const TrainConfig& c) {
  if (!c.preset.empty()) {
    check_flag("--preset", [&] { models::lm_preset(c.preset); });
    const models::LmConfig p = models::lm_preset(c.preset);
    usage(p.arch == c.model, "--preset=", c.preset, ": a ", p.arch, " size, not --model=", c.model);
  }
  usage(c.dropout >= 0 && c.dropout < 1, "--dropout: expected a value in [0, 1), got ", c.dropout);
  check_flag("--model", [&] { models::check_lm_config(lm_config(c)); });
  const models::LmConfig m = lm_config(c);
  usage(c.context == 0 || c.context <= m.context, "--context=", c.context, ": more than the ",
        c.preset, " model's ", m.context, " positions");
}

static void validate_model(const TrainConfig& c) {
  usage(label_smoothing_of(c) >= 0 && label_smoothing_of(c) < 1,
        "--label-smoothing: expected a value in [0, 1), got ", label_smoothing_of(c));
  if (lm_model(c.model)) {
    validate_lm(c);
  } else if (c.model == "transformer") {
    if (!c.preset.empty()) check_flag("--preset", [&] { models::transformer_preset(c.preset); });
    usage(c.layers >= 1, "--layers: expected >= 1, got ", c.layers);
    usage(c.ffn >= 1, "--ffn: expected >= 1, got ", c.ffn);
    usage(c.heads >= 1, "--heads: expected >= 1, got ", c.heads);
    usage(c.dim >= 2 && c.dim % c.heads == 0, "--dim: expected a multiple of --heads (", c.heads,
          "), got ", c.dim);
    usage(c.dropout >= 0 && c.dropout < 1, "--dropout: expected a value in [0, 1), got ",
          c.dropout);
    usage(c.logit_clip >= 0, "--logit-clip: expected >= 0 (0 = off), got ", c.logit_clip);
    usage(c.max_len >= 4 && c.max_len <= 512, "--max-len: expected 4..512 bytes, got ", c.max_len);
    usage(c.eval_sentences >= 0, "--eval-sentences: expected >= 0, got ", c.eval_sentences);
  } else {
    usage(c.normal_cells >= 0, "--normal-cells: expected N >= 0, got ", c.normal_cells);
    usage(c.stem == "paper" || c.stem == "small", "--stem: expected paper or small, got '", c.stem,
          "'");
    usage(c.filters >= 8 && c.filters % 8 == 0,
          "--filters: expected F >= 8 and a multiple of 8, got ", c.filters);
    usage(c.image_size == 28 || (c.image_size >= 32 && c.image_size % 32 == 0),
          "--image-size: expected 28, 32 or a multiple of 32, got ", c.image_size);
    usage(c.image_size != 28 || c.stem == "small",
          "--image-size=28: only AmoebaNet's small-input layout (--stem=small) takes 28x28 "
          "images; the others take 32 (padded) or a multiple of 32");
    usage(c.resnet_depth == 50 || c.resnet_depth == 101 || c.resnet_depth == 152,
          "--resnet-depth: expected 50, 101 or 152, got ", c.resnet_depth);
    usage(c.resnet_width >= 1, "--resnet-width: expected >= 1, got ", c.resnet_width);
    usage(c.model != "unet" ||
              (c.unet_depth >= 1 &&
               (c.image_size % (int64_t{1} << std::min<int64_t>(c.unet_depth, 30))) == 0),
          "--unet-depth: expected B >= 1 with --image-size (", c.image_size,
          ") a multiple of 2^B, got ", c.unet_depth);
    usage(c.unet_channels >= 2 && c.unet_channels % 2 == 0,
          "--unet-channels: expected an even C >= 2, got ", c.unet_channels);
    usage(c.unet_convs >= 1, "--unet-convs: expected >= 1, got ", c.unet_convs);
  }
}

// What the pipeline's own rules (pipeline/options.h, resolve_pipeline) cannot
// know: the batch and the model's layers.
static void validate_pipeline(const TrainConfig& c) {
  const int64_t batch = c.batch > 0 ? c.batch : default_batch(c.model);
  usage(c.M <= batch, "--M: ", c.M, " micro-batches need --batch >= M, but the batch is ", batch);
  usage(c.M * c.replicas <= batch, "--M and --replicas: R x M = ", c.replicas * c.M,
        " micro-batches need --batch >= R x M, but the batch is ", batch);
  check_flag("--precision", [&] { parse_precision(c.precision); });  // before --loss-scale's
  check_flag("--loss-scale", [&] { loss_scale_setting(c); });
  if (!c.balance.empty()) {
    std::vector<int64_t> sizes;
    check_flag("--balance", [&] { sizes = parse_balance(c.balance); });
    int64_t sum = 0;
    for (int64_t s : sizes) sum += s;
    const int64_t layers = model_layer_count(c);
    usage(sum == layers, "--balance: the sizes sum to ", sum, " but the ", c.model, " has ", layers,
          " layers (expected sizes summing to ", layers, ")");
  }
}

static void validate_optimisation(const TrainConfig& c) {
  usage(c.batch >= 0, "--batch: expected a positive size, got ", c.batch);
  if (!c.optimizer.empty())
    usage(c.optimizer == "adam" || c.optimizer == "adamw" || c.optimizer == "sgd" ||
              c.optimizer == "rmsprop",
          "--optimizer: expected adam, adamw, sgd or rmsprop, got '", c.optimizer, "'");
  const std::string opt =
      !c.optimizer.empty() ? c.optimizer : (image_model(c.model) ? "sgd" : "adam");
  usage(!c.momentum || opt == "sgd" || opt == "rmsprop",
        "--momentum: applies to --optimizer=sgd or rmsprop, not ", opt);
  usage(!c.lr || (*c.lr > 0 && std::isfinite(*c.lr)), "--lr: expected a positive rate, got ",
        c.lr.value_or(0));
  usage(!c.weight_decay || *c.weight_decay >= 0, "--weight-decay: expected >= 0, got ",
        c.weight_decay.value_or(0));
  usage(!c.momentum || *c.momentum >= 0, "--momentum: expected >= 0, got ", c.momentum.value_or(0));
  usage(c.clip_norm >= 0, "--clip-norm: expected >= 0 (0 = off), got ", c.clip_norm);
  if (!c.lr_schedule.empty())
    check_flag("--lr-schedule", [&] { optim::parse_lr_schedule(c.lr_schedule, 1.0); });
  usage(c.threads >= 0, "--threads: expected >= 0 (0 = cores / K), got ", c.threads);
  if (!c.export_data.empty()) {
    usage(c.model == "transformer" || lm_model(c.model),
          "--export-data: writes the translation task's or a language model's data; --model=",
          c.model,
          " has no PyTorch reference that reads it (use --model=transformer, gpt2 or llama)");
    usage(c.resume.empty(),
          "--export-data: exports a run from its start (its initial weights); drop --resume");
    usage(c.replicas == 1, "--export-data: runs in one process; drop --replicas");
    // It trains nothing: an output flag of the training run would only be emptied.
    for (const auto& [flag, value] : {std::pair{"--metrics", &c.metrics},
                                      {"--save", &c.save},
                                      {"--plot", &c.plot},
                                      {"--trace", &c.trace}})
      usage(value->empty(), "--export-data: trains nothing, so it writes no ", flag, " file (drop ",
            flag, "; the same command without --export-data is the run)");
  }
}

LossScaleSetting loss_scale_setting(const TrainConfig& c) {
  const std::string& v = c.loss_scale;
  auto number = [&](const std::string& text) {
    char* end = nullptr;
    const double s = std::strtod(text.c_str(), &end);
    GPIPE_CHECK(!text.empty() && *end == '\0' && std::isfinite(s) && s > 0,
                "expected auto, dynamic, dynamic:INITIAL, none or a positive number, got '", v,
                "'");
    return s;
  };
  if (v == "auto")
    return parse_precision(c.precision) == Precision::kFloat16 ? LossScaleSetting{true, 65536.0}
                                                               : LossScaleSetting{false, 1.0};
  if (v == "dynamic") return {true, 65536.0};
  if (v.rfind("dynamic:", 0) == 0) return {true, number(v.substr(8))};
  if (v == "none") return {false, 1.0};
  return {false, number(v)};
}

OptionNames flag_names() {
  return {.K = "--K",
          .M = "--M",
          .virtual_stages = "--virtual",
          .schedule = "--schedule",
          .balance = "--balance",
          .devices = "--devices",
          .replicas = "--replicas",
          .timeout = "--timeout",
          .watchdog = "--watchdog"};
}

PipelineOptions pipeline_options(const TrainConfig& c) {
  PipelineOptions o;
  o.K = c.K;
  o.virtual_stages = c.virtual_stages;
  o.order_costs.link_latency = std::max(0.0, c.order_latency);
  o.measure_link_latency = c.order_latency < 0;  // no --order-latency: measured at start-up
  o.M = c.M;
  usage(!all_digits(c.devices), "--devices=", c.devices,
        ": a count of devices is --K; --devices takes a list like cpu:0,cpu:1");
  check_flag("--devices", [&] {
    for (const std::string& d : split_commas(c.devices)) o.devices.emplace_back(d);
  });
  check_flag("--remat", [&] { o.remat = parse_remat(c.remat); });
  check_flag("--precision", [&] { o.precision = parse_precision(c.precision); });
  const std::string file_prefix = "file:";
  check_flag("--schedule", [&] {
    if (c.schedule.rfind(file_prefix, 0) == 0)
      o.custom_schedule = std::make_shared<const Schedule>(
          load_schedule_file(c.schedule.substr(file_prefix.size())));
    else
      o.schedule = parse_schedule(c.schedule);
  });
  if (!c.balance.empty()) check_flag("--balance", [&] { o.balance = parse_balance(c.balance); });
  if (c.balance_by != "plan")  // plan: the trainer's planner sets the cuts
    check_flag("--balance-by", [&] { o.balance_by = parse_balance_by(c.balance_by); });
  check_flag("--skips", [&] { o.skip_transport = parse_skip_transport(c.skips); });
  check_flag("--layout", [&] { o.layout = parse_rank_layout(c.layout); });
  o.threads_per_stage = c.threads;
  o.check_finite = true;  // a non-finite loss fails the step cleanly; train() skips it
  o.trace = !c.trace.empty();
  o.timeout_seconds = c.timeout;
  o.watchdog_seconds = c.watchdog;
  o.replicas = c.replicas;
  o.sync_batchnorm = c.sync_batchnorm;
  return o;
}

ResolvedOptions resolve_pipeline(PipelineOptions o) {
  try {
    return resolve(std::move(o), flag_names());
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

ResolvedOptions resolve_pipeline(const TrainConfig& c) {
  ResolvedOptions r = resolve_pipeline(pipeline_options(c));
  const int64_t cells = r.cells(), layers = model_layer_count(c);
  const int v = r.options.virtual_stages;
  usage(cells <= layers, "--K: ", cells, v > 1 ? " cells (K x v)" : " partitions", " but the ",
        c.model, " has only ", layers, " layers to cut (expected ", v > 1 ? "K x v" : "K",
        " <= ", layers, "; ", deeper_model_hint(c, static_cast<int>(cells)), ")");
  return r;
}

void validate(const TrainConfig& c) {
  usage(!c.model.empty(),
        "--model is required: --model=transformer, gpt2, llama, amoebanet, amoebanet-b, resnet or "
        "unet");
  usage(c.model == "transformer" || lm_model(c.model) || image_model(c.model),
        "--model: expected transformer, gpt2, llama, amoebanet, amoebanet-b, resnet or unet, got '",
        c.model, "'");
  if (c.print_params) {
    if (!c.preset.empty())
      check_flag("--preset", [&] {
        if (lm_model(c.model))
          models::lm_preset(c.preset);
        else
          models::transformer_preset(c.preset);
      });
    return;
  }
  usage(!(c.steps > 0 && c.epochs > 0), "--steps and --epochs: give one of them, not both");
  usage(c.steps >= 0, "--steps: expected a positive count, got ", c.steps);
  usage(c.epochs >= 0, "--epochs: expected a positive count, got ", c.epochs);
  validate_model(c);
  validate_pipeline(c);
  validate_optimisation(c);
  usage(c.eval_every >= 0, "--eval-every: expected >= 0 (0 = only at the end), got ", c.eval_every);
  usage(c.eval_batches >= 0, "--eval-batches: expected >= 0 (0 = the whole test split), got ",
        c.eval_batches);
  usage(c.save_every >= 0, "--save-every: expected >= 0, got ", c.save_every);
  usage(c.save_every == 0 || !c.save.empty(), "--save-every: needs --save=PATH");
  usage(c.log_every >= 1, "--log-every: expected >= 1, got ", c.log_every);
  usage(c.train_limit >= 0, "--train-limit: expected >= 0 (0 = all), got ", c.train_limit);
}

TrainConfig resolve_defaults(TrainConfig c, int64_t batches_per_epoch) {
  const bool amoeba = image_model(c.model);
  if (c.batch == 0) c.batch = default_batch(c.model);
  if (c.steps == 0 && c.epochs == 0) {  // the default training budget
    if (amoeba)
      c.epochs = kDefaultEpochsAmoebaNet;
    else
      c.steps = kDefaultStepsTransformer;
  }
  if (c.epochs > 0) {
    GPIPE_CHECK(batches_per_epoch > 0, "--epochs: the training set makes no batch of ", c.batch);
    c.steps = c.epochs * batches_per_epoch;
  }
  if (c.optimizer.empty()) c.optimizer = amoeba ? "sgd" : "adam";
  if (!c.lr) c.lr = amoeba ? 0.05 : 2e-3;
  if (!c.weight_decay) c.weight_decay = amoeba ? 5e-4 : 0.0;
  c.label_smoothing = label_smoothing_of(c);
  if (!c.momentum && (c.optimizer == "sgd" || c.optimizer == "rmsprop")) c.momentum = 0.9;
  if (c.lr_schedule.empty()) {
    const int64_t warmup = std::max<int64_t>(1, c.steps / (amoeba ? 50 : 10));
    c.lr_schedule = warmup < c.steps ? detail::concat("cosine:total=", c.steps, ",warmup=", warmup)
                                     : "constant";
  }
  return c;
}

}  // namespace gpipe::train
