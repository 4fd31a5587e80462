// gpipe_train's flags. CLI11 checks what it can (ranges, choices, the
// --steps/--epochs exclusion, required --model); validate() then checks the
// combinations CLI11 cannot express, and parse_train_flags rejects flags
// that do not apply to the chosen model instead of silently ignoring them.
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
#include "models/resnet.h"
#include "models/transformer.h"
#include "models/unet.h"
#include "optim/schedule.h"
#include "pipeline/partition.h"
#include "pipeline/pipeline.h"
#include "pipeline/plan.h"
#include "pipeline/remat.h"
#include "pipeline/schedule.h"
#include "tools/train/cli_checks.h"

namespace gpipe::train {
namespace {

constexpr int64_t kDefaultStepsTransformer = 600;
constexpr int64_t kDefaultEpochsAmoebaNet = 2;

// The --help footer; the budget row is written from the constants above.
std::string defaults_table() {
  return detail::concat(
      "Per-model defaults (S = total steps):\n"
      "                  transformer                  amoebanet, amoebanet-b, resnet, unet\n"
      "  --optimizer     adam                         sgd (Nesterov)\n"
      "  --lr            2e-3                         0.05\n"
      "  --lr-schedule   cosine:total=S,warmup=S/10   cosine:total=S,warmup=S/50\n"
      "  --weight-decay  0                            5e-4\n"
      "  --momentum      - (adam takes none)          0.9\n"
      "  --batch         32                           128\n"
      "  budget          --steps=",
      kDefaultStepsTransformer, "                  --epochs=", kDefaultEpochsAmoebaNet,
      "\n  (the budget applies when neither --steps nor --epochs is given)\n");
}

// Throws UsageError(parts...) unless `ok`.
template <class... Parts>
void usage(bool ok, const Parts&... parts) {
  if (!ok) throw UsageError(detail::concat(parts...));
}

// Runs `f`, turning a gpipe::Error into a UsageError naming `flag`.
template <class F>
void check_flag(const char* flag, F&& f) {
  try {
    f();
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(detail::concat(flag, ": ", e.what()));
  }
}

bool all_digits(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](unsigned char ch) { return std::isdigit(ch); });
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

}  // namespace

bool image_model(const std::string& model) {
  return model == "amoebanet" || model == "amoebanet-b" || model == "resnet" || model == "unet";
}

double label_smoothing_of(const TrainConfig& c) {
  return c.label_smoothing.value_or(image_model(c.model) ? 0.0 : 0.1);
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

static void validate_model(const TrainConfig& c) {
  usage(label_smoothing_of(c) >= 0 && label_smoothing_of(c) < 1,
        "--label-smoothing: expected a value in [0, 1), got ", label_smoothing_of(c));
  if (c.model == "transformer") {
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
    usage(c.model == "transformer",
          "--export-data: writes the translation task's data; --model=", c.model,
          " has no PyTorch reference that reads it (use --model=transformer)");
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
        "--model is required: --model=transformer, amoebanet, amoebanet-b, resnet or unet");
  usage(c.model == "transformer" || image_model(c.model),
        "--model: expected transformer, amoebanet, amoebanet-b, resnet or unet, got '", c.model,
        "'");
  if (c.print_params) {
    if (!c.preset.empty()) check_flag("--preset", [&] { models::transformer_preset(c.preset); });
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

namespace {

// Flags whose "given or not" matters after parsing, and optional values.
struct Given {
  double lr = 0, weight_decay = 0, momentum = 0, label_smoothing = 0;
  CLI::Option *lr_opt = nullptr, *wd_opt = nullptr, *momentum_opt = nullptr;
  CLI::Option* label_smoothing_opt = nullptr;
  CLI::Option* preset = nullptr;
  std::vector<CLI::Option*> sizes;  // --layers --ffn --heads --dim
  CLI::Option *balance = nullptr, *balance_by = nullptr;
  CLI::Option* virtual_stages = nullptr;
  // What --plan=auto chooses itself.
  std::vector<CLI::Option*> planned;  // --M --schedule --remat --virtual --balance --balance-by
  CLI::Option *plan = nullptr, *memory = nullptr;
};

void add_model_flags(CLI::App& app, TrainConfig& c, Given& g) {
  // Required: checked in validate(), after CLI11 has named unknown flags.
  app.add_option("--model", c.model, "transformer | amoebanet | amoebanet-b | resnet | unet")
      ->check(CLI::IsMember({"transformer", "amoebanet", "amoebanet-b", "resnet", "unet"}));
  app.add_flag("--print-params", c.print_params,
               "print the parameter count (from the formula, nothing allocated) and exit");
  g.preset = app.add_option("--preset", c.preset,
                            "transformer: a paper size T(L,H,A): T(6,8192,16), T(24,8192,16), "
                            "T(12,16384,32), T(32,16384,32), T(64,16384,32)");
  for (auto [flag, field, help] :
       {std::tuple{"--layers", &c.layers, "transformer: L encoder (and decoder) layers"},
        std::tuple{"--ffn", &c.ffn, "transformer: H, feed-forward width"},
        std::tuple{"--heads", &c.heads, "transformer: A, attention heads"},
        std::tuple{"--dim", &c.dim, "transformer: model dimension"}})
    g.sizes.push_back(app.add_option(flag, *field, help)->capture_default_str()->check(kPositive));
  app.add_option("--dropout", c.dropout, "transformer: dropout rate")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.99));
  g.label_smoothing_opt =
      app.add_option("--label-smoothing", g.label_smoothing,
                     "cross-entropy label smoothing (default 0.1 transformer, 0 image models)")
          ->check(CLI::Range(0.0, 0.99));
  app.add_option("--logit-clip", c.logit_clip, "transformer: soft-clip logits to (-c, c); 0 = off")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_flag("--scaled-init", c.scaled_init,
               "transformer: scale residual-branch weights by 1/sqrt(2L)");
  app.add_option("--normal-cells", c.normal_cells, "amoebanet: N, normal cells per stage")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--filters", c.filters,
                 "amoebanet: F (the stem has F/4 channels, F with --stem=small; multiple of 8)")
      ->capture_default_str()
      ->check(kPositive);
  app.add_option("--stem", c.stem,
                 "amoebanet: paper (ImageNet layout: stride-2 stem, two stem reduction cells) | "
                 "small (for 28-32 px images: stride-1 stem, cells at 32, 16, 8 px)")
      ->capture_default_str()
      ->check(CLI::IsMember({"paper", "small"}));
  app.add_option("--resnet-depth", c.resnet_depth, "resnet: 50, 101 or 152")->capture_default_str();
  app.add_option("--resnet-width", c.resnet_width,
                 "resnet: W, the stem's channels (group g has W 2^g planes; torchvision: 64)")
      ->capture_default_str();
  app.add_flag("--split-blocks", c.split_blocks,
               "resnet: three layers per block, the shortcut a skip (cuts inside blocks)");
  app.add_option("--unet-depth", c.unet_depth, "unet: B, encoder levels")->capture_default_str();
  app.add_option("--unet-channels", c.unet_channels, "unet: C, level 0's channels (even)")
      ->capture_default_str();
  app.add_option("--unet-convs", c.unet_convs, "unet: conv units per block (torchgpipe: 5)")
      ->capture_default_str();
}

void add_data_flags(CLI::App& app, TrainConfig& c) {
  app.add_option("--data-dir", c.data_dir,
                 "locale dir (transformer) or Fashion-MNIST dir (the image models)");
  app.add_option("--languages", c.languages,
                 "transformer: source languages (default fr,de,es,it,nl,pl,pt,ru,sv,uk)")
      ->delimiter(',');
  app.add_option("--max-len", c.max_len,
                 "transformer: longest source/target in bytes (longer pairs are dropped)")
      ->capture_default_str()
      ->check(CLI::Range(4, 512));
  app.add_option("--train-limit", c.train_limit, "train on N training examples only (0 = all)")
      ->check(kNonNegative);
  app.add_flag("--augment", c.augment,
               "image models: random flips and +-2 pixel shifts (a function of seed and step)");
  app.add_option("--image-size", c.image_size,
                 "image models: 32 (28x28 zero-padded), a multiple of 32 (then upsampled), or "
                 "28 (as they are; --stem=small only)")
      ->capture_default_str();
}

void add_optimisation_flags(CLI::App& app, TrainConfig& c, Given& g) {
  app.add_option("--batch", c.batch, "N, examples per step (model default: see below)")
      ->check(kPositive);
  auto* steps =
      app.add_option("--steps", c.steps, "total steps (a resumed run counts the steps before it)")
          ->check(kPositive);
  auto* epochs = app.add_option("--epochs", c.epochs, "total epochs over the training split")
                     ->check(kPositive);
  steps->excludes(epochs);
  g.lr_opt = app.add_option("--lr", g.lr, "peak learning rate")->check(kPositive);
  app.add_option("--lr-schedule", c.lr_schedule,
                 "constant | inverse_sqrt:warmup=W | noam:d_model=D,warmup=W | "
                 "cosine:total=T[,warmup=W][,floor=F] | step:every=K[,gamma=G]");
  app.add_option("--optimizer", c.optimizer, "adam | adamw | sgd | rmsprop")
      ->check(CLI::IsMember({"adam", "adamw", "sgd", "rmsprop"}));
  g.wd_opt = app.add_option("--weight-decay", g.weight_decay,
                            "L2 (adam, sgd, rmsprop) or decoupled (adamw)")
                 ->check(kNonNegative);
  g.momentum_opt = app.add_option("--momentum", g.momentum, "sgd / rmsprop momentum")
                       ->check(CLI::Range(0.0, 0.999));
  app.add_option("--clip-norm", c.clip_norm, "clip the global gradient norm; 0 = off")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--precision", c.precision,
                 "fp32 | bf16 | fp16: activations between layers (and across cells) and matrix "
                 "products in 16 bits; master weights, gradients and optimizer state float32")
      ->capture_default_str();
  app.add_option("--loss-scale", c.loss_scale,
                 "auto (dynamic from 65536 under fp16, none otherwise) | dynamic | "
                 "dynamic:INITIAL | none | a fixed scale")
      ->capture_default_str();
  app.add_option("--seed", c.seed, "seeds weights, data order, dropout")->capture_default_str();
  app.add_option("--threads", c.threads, "intra-op threads per stage; 0 = cores / K")
      ->capture_default_str()
      ->check(kNonNegative);
}

void add_run_flags(CLI::App& app, TrainConfig& c) {
  app.add_option("--eval-every", c.eval_every, "evaluate every N steps (0 = only at the end)")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--eval-batches", c.eval_batches,
                 "test batches per evaluation (0 = the whole test split)")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--eval-sentences", c.eval_sentences,
                 "transformer: test sentences greedily decoded for chrF")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--samples", c.samples, "transformer: sample translations printed at the end")
      ->capture_default_str()
      ->check(kNonNegative);
  app.add_option("--save", c.save,
                 "checkpoint written at the end (and every --save-every steps); {step} in it "
                 "becomes the step");
  app.add_option("--save-every", c.save_every, "also checkpoint every N steps")
      ->check(kNonNegative);
  app.add_option("--resume", c.resume, "continue from this checkpoint (same model and data flags)");
  app.add_flag("--final-eval,!--no-final-eval", c.final_eval,
               "evaluate on the test split at the end (default on)");
  app.add_option("--metrics", c.metrics, "JSON-lines file: one record per step and per evaluation");
  app.add_option("--plot", c.plot,
                 "at the end, draw this run's loss, learning rate, throughput per step and "
                 "evaluation metrics into this SVG file");
  app.add_option("--export-data", c.export_data,
                 "transformer: write this run's data (training pairs, each step's rows, the "
                 "evaluated test pairs), its settings and its initial weights into this directory "
                 "for benchmarks/translation_torch.py, then exit without training");
  app.add_option("--log-every", c.log_every, "progress line every N steps")
      ->capture_default_str()
      ->check(kPositive);
}

void add_pipeline_flags(CLI::App& app, TrainConfig& c, Given& g) {
  add_renamed_flag(&app, "--partitions", "--K");
  add_renamed_flag(&app, "--micro-batches", "--M");
  app.add_option("--K", c.K, "devices of one pipeline, one cell each (v with --virtual)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  g.virtual_stages = app.add_option("--virtual", c.virtual_stages,
                                    "v: cells per device for --schedule=interleaved (cell c on "
                                    "device c mod K); zb-v implies 2")
                         ->capture_default_str()
                         ->check(CLI::Range(1, 64));
  g.planned.push_back(app.add_option("--M", c.M, "micro-batches per mini-batch")
                          ->capture_default_str()
                          ->check(CLI::Range(1, 1 << 20)));
  g.planned.push_back(g.virtual_stages);
  g.planned.push_back(
      app.add_option(
             "--schedule", c.schedule,
             "gpipe | 1f1b | zb-h1 | zb-h1-lowmem | interleaved | zb-v | file:PATH (a program in "
             "the text form "
             "--print-schedule writes)")
          ->capture_default_str());
  app.add_option(
      "--schedule-svg", c.schedule_svg,
      "write the program's predicted timeline on uniform stages as an SVG picture, then exit "
      "(as --print-schedule)");
  app.add_flag(
      "--print-schedule", c.print_schedule,
      "print the step's program for --K, --M, --schedule and --remat, with its dry run, and exit");
  g.planned.push_back(app.add_option("--remat", c.remat, "always | except_last | never")
                          ->capture_default_str()
                          ->check(CLI::IsMember({"always", "except_last", "never"})));
  g.balance = app.add_option("--balance", c.balance,
                             "layers per cell, e.g. 4,4,3,3 (overrides --balance-by)");
  g.balance_by =
      app.add_option("--balance-by", c.balance_by,
                     "cost | time | memory | plan (the planner's cuts for --M, --schedule, "
                     "--remat against the simulated step time)")
          ->capture_default_str()
          ->check(CLI::IsMember({"cost", "time", "memory", "plan"}));
  g.planned.push_back(g.balance);
  g.planned.push_back(g.balance_by);
  app.add_option("--skips", c.skips,
                 "direct | through-cells: skips between cells (U-Net, split ResNet) go straight "
                 "from the producing cell to the consuming one, or through every cell between")
      ->capture_default_str()
      ->check(CLI::IsMember({"direct", "through-cells"}));
  g.plan = app.add_option("--plan", c.plan,
                          "auto: the planner picks M, the schedule, each cell's remat and the "
                          "cuts for --K, --batch and --memory (gpipe_plan prints the choices)")
               ->check(CLI::IsMember({"auto"}));
  g.memory = app.add_option(
      "--memory", c.memory,
      "per-device memory limit for --plan=auto or --balance-by=plan, e.g. 16GB, 512MiB");
  app.add_option("--devices", c.devices, "cpu:0,cpu:1,... (default cpu:0..cpu:K-1)");
  app.add_option("--trace", c.trace, "write a Chrome trace of every step to this file at the end");
  app.add_option("--timeout", c.timeout,
                 "seconds a stage waits for a neighbour before the step fails")
      ->capture_default_str();
  app.add_option("--watchdog", c.watchdog,
                 "a step longer than this prints what every stage waits for (0 = timeout / 2)");
  app.add_option("--replicas", c.replicas,
                 "R data-parallel pipelines; run as mpirun -np K*R gpipe_train ...")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--layout", c.layout,
                 "pipeline: ranks rK..rK+K-1 are replica r's stages; stage: ranks sR..sR+R-1 are "
                 "stage s's replicas")
      ->capture_default_str()
      ->check(CLI::IsMember({"pipeline", "stage"}));
  app.add_flag("--sync-bn,!--no-sync-bn", c.sync_batchnorm,
               "sum BatchNorm statistics over replicas before folding them (default on)");
}

// Flags that do not apply to the chosen model, or contradict each other,
// are errors rather than silently ignored.
void check_combinations(const CLI::App& app, const TrainConfig& c, const Given& g) {
  if (c.model.empty())
    return;  // validate() says --model is required, before any model-specific check
  const std::vector<std::string> transformer_only = {
      "--preset",         "--layers",     "--ffn",         "--heads",     "--dim",
      "--dropout",        "--logit-clip", "--scaled-init", "--languages", "--max-len",
      "--eval-sentences", "--samples"};
  struct Only {
    std::vector<std::string> flags;
    std::vector<std::string> models;
  };
  const std::vector<Only> only = {
      {transformer_only, {"transformer"}},
      {{"--augment", "--image-size"}, {"amoebanet", "amoebanet-b", "resnet", "unet"}},
      {{"--normal-cells", "--filters", "--stem"}, {"amoebanet", "amoebanet-b"}},
      {{"--resnet-depth", "--resnet-width", "--split-blocks"}, {"resnet"}},
      {{"--unet-depth", "--unet-channels", "--unet-convs"}, {"unet"}}};
  for (const Only& o : only) {
    if (std::find(o.models.begin(), o.models.end(), c.model) != o.models.end()) continue;
    std::string names;
    for (const auto& m : o.models) names += (names.empty() ? "" : ", ") + m;
    for (const auto& f : o.flags)
      usage(app.count(f) == 0, f, ": applies to --model=", names, " only, not --model=", c.model);
  }
  for (const CLI::Option* o : g.sizes)
    usage(g.preset->count() == 0 || o->count() == 0, "--preset and ", o->get_name(),
          ": the preset fixes L, H, A and dim; give one or the other");
  if (g.plan->count())
    for (const CLI::Option* o : g.planned)
      usage(o->count() == 0, "--plan=auto and ", o->get_name(),
            ": the planner chooses M, the schedule, remat and the cuts; give --plan=auto or ",
            o->get_name());
  usage(g.memory->count() == 0 || g.plan->count() || c.balance_by == "plan",
        "--memory: applies to --plan=auto or --balance-by=plan only");
  if (g.memory->count()) check_flag("--memory", [&] { parse_bytes(c.memory); });
  usage(g.balance->count() == 0 || g.balance_by->count() == 0,
        "--balance and --balance-by: an explicit --balance leaves nothing to balance; give one or "
        "the other");
}

}  // namespace

namespace {

// Parses into `c`; `canonical`, if given, receives every option's value as
// CLI11 writes a config file (independent of flag order and spelling).
void parse_into(const std::vector<std::string>& args, TrainConfig& c, std::string* canonical) {
  Given g;
  CLI::App app{
      "gpipe_train: train a Transformer (iso-codes many-to-English translation) or an "
      "AmoebaNet-D (Fashion-MNIST) through a GPipe pipeline of K cells and M micro-batches",
      "gpipe_train"};
  app.footer(defaults_table());
  app.get_formatter()->column_width(34);
  add_model_flags(app, c, g);
  add_data_flags(app, c);
  add_optimisation_flags(app, c, g);
  add_run_flags(app, c);
  add_pipeline_flags(app, c, g);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    throw HelpRequested{app.help()};
  } catch (const CLI::CallForAllHelp&) {
    throw HelpRequested{app.help("", CLI::AppFormatMode::All)};
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  if (g.lr_opt->count()) c.lr = g.lr;
  if (g.wd_opt->count()) c.weight_decay = g.weight_decay;
  if (g.label_smoothing_opt->count()) c.label_smoothing = g.label_smoothing;
  if (g.momentum_opt->count()) c.momentum = g.momentum;
  check_combinations(app, c, g);
  // zb-v holds two cells on each device (a V): resolve() implies --virtual=2,
  // so an explicit --virtual=1 is refused here.
  bool zb_v = false;
  try {
    zb_v = parse_schedule(c.schedule) == ScheduleKind::kZBV;
  } catch (const Error&) {
    // file:PATH or an unknown name (pipeline_options reports it)
  }
  usage(!(zb_v && g.virtual_stages->count() && c.virtual_stages == 1),
        "--virtual=1: zb-v holds exactly 2 cells per device (leave --virtual out)");
  validate(c);
  c.pipeline = std::make_shared<const ResolvedOptions>(resolve_pipeline(c));
  c.virtual_stages = c.pipeline->options.virtual_stages;
  if (canonical) *canonical = app.config_to_str(/*default_also=*/true);
}

}  // namespace

TrainConfig parse_train_flags(const std::vector<std::string>& args) {
  TrainConfig c;
  parse_into(args, c, nullptr);
  return c;
}

std::string canonical_flags(const std::vector<std::string>& args) {
  TrainConfig c;
  std::string out;
  parse_into(args, c, &out);
  return out;
}

}  // namespace gpipe::train
