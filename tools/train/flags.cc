// gpipe_train's flags. CLI11 checks what it can (ranges, choices, the
// --steps/--epochs exclusion, required --model); validate() (config.cc) then
// checks the combinations CLI11 cannot express, and parse_train_flags
// rejects flags that do not apply to the chosen model instead of silently
// ignoring them.
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/plan.h"
#include "pipeline/schedule.h"
#include "tools/train/cli_checks.h"
#include "tools/train/config.h"
#include "tools/train/flag_checks.h"
#include "tools/train/hf_io.h"

namespace gpipe::train {
namespace {

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

}  // namespace

namespace {

// Flags whose "given or not" matters after parsing, and optional values.
struct Given {
  double lr = 0, weight_decay = 0, momentum = 0, label_smoothing = 0;
  CLI::Option *lr_opt = nullptr, *wd_opt = nullptr, *momentum_opt = nullptr;
  CLI::Option* label_smoothing_opt = nullptr;
  CLI::Option* preset = nullptr;
  std::vector<CLI::Option*> sizes;  // --layers --ffn --heads --dim --kv-heads
  CLI::Option* dropout = nullptr;
  CLI::Option *balance = nullptr, *balance_by = nullptr;
  CLI::Option* virtual_stages = nullptr;
  // What --plan=auto chooses itself.
  std::vector<CLI::Option*> planned;  // --M --schedule --remat --virtual --balance --balance-by
  CLI::Option *plan = nullptr, *memory = nullptr;
};

void add_model_flags(CLI::App& app, TrainConfig& c, Given& g) {
  // Required: checked in validate(), after CLI11 has named unknown flags.
  app.add_option("--model", c.model,
                 "transformer | gpt2 | llama | amoebanet | amoebanet-b | resnet | unet")
      ->check(CLI::IsMember(
          {"transformer", "gpt2", "llama", "amoebanet", "amoebanet-b", "resnet", "unet"}));
  app.add_flag("--print-params", c.print_params,
               "print the parameter count (from the formula, nothing allocated) and exit");
  g.preset = app.add_option("--preset", c.preset,
                            "transformer: a paper size T(L,H,A): T(6,8192,16), T(24,8192,16), "
                            "T(12,16384,32), T(32,16384,32), T(64,16384,32); gpt2 / llama: "
                            "gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-3.2-1b, llama-3.2-3b, "
                            "llama-3.1-8b, llama-3.1-70b");
  for (auto [flag, field, help] :
       {std::tuple{"--layers", &c.layers,
                   "transformer: L encoder (and decoder) layers; gpt2 / llama: L blocks (4)"},
        std::tuple{"--ffn", &c.ffn, "transformer: H, feed-forward width; gpt2 / llama: MLP width"},
        std::tuple{"--heads", &c.heads, "transformer, gpt2, llama: attention heads"},
        std::tuple{"--dim", &c.dim, "transformer, gpt2, llama: model dimension"}})
    g.sizes.push_back(app.add_option(flag, *field, help)->capture_default_str()->check(kPositive));
  g.dropout =
      app.add_option("--dropout", c.dropout, "transformer (0.1), gpt2 / llama (0): dropout rate")
          ->capture_default_str()
          ->check(CLI::Range(0.0, 0.99));
  g.sizes.push_back(app.add_option("--kv-heads", c.kv_heads,
                                   "llama: grouped-query attention's K / V heads (a divisor of "
                                   "--heads; default 2 at the small size)")
                        ->check(kPositive));
  app.add_option("--context", c.context,
                 "gpt2 / llama: tokens per training row (default 128; a preset keeps its own "
                 "position table and takes --context up to its length)")
      ->check(kPositive);
  app.add_option("--vocab", c.vocab,
                 "gpt2 / llama: the model's vocabulary (default the tokenizer's; larger pads it)")
      ->check(kPositive);
  app.add_option("--tokenizer", c.tokenizer,
                 "gpt2 / llama, and transformer with --data (both sides): bytes (the default), "
                 "a Hugging Face tokenizer.json or a SentencePiece .model")
      ->capture_default_str();
  app.add_option("--src-tokenizer", c.src_tokenizer,
                 "transformer with --data: the source side's tokenizer (default --tokenizer)");
  app.add_option("--tgt-tokenizer", c.tgt_tokenizer,
                 "transformer with --data: the target side's tokenizer (default --tokenizer)");
  app.add_option("--init-from", c.init_from,
                 "gpt2 / llama: a Hugging Face model folder (config.json, safetensors): its "
                 "architecture and weights (--model may be left out)");
  app.add_option("--export-hf", c.export_hf,
                 "gpt2 / llama: at the end, write the weights as a Hugging Face model folder");
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
                 "transformer: longest source/target in bytes, in tokens with --data (longer "
                 "pairs are dropped)")
      ->capture_default_str()
      ->check(CLI::Range(4, 512));
  app.add_option("--train-limit", c.train_limit, "train on N training examples only (0 = all)")
      ->check(kNonNegative);
  app.add_option("--data", c.data,
                 "gpt2 / llama: the training text instead of the fortunes: files, folders "
                 "(recursively, in name order) and globs of .txt, .jsonl and llm.c .bin shards")
      ->delimiter(',');
  app.add_option("--val-data", c.val_data,
                 "held-out data (as --data; default: --val-fraction of --data's documents)");
  app.add_option("--val-fraction", c.val_fraction,
                 "the held-out share of the documents when --val-data is not given")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.9));
  app.add_option("--doc-split", c.doc_split,
                 "gpt2 / llama .txt files: file (each file one document) | blank (documents "
                 "end at blank lines)")
      ->capture_default_str()
      ->check(CLI::IsMember({"file", "blank"}));
  app.add_option("--text-field", c.text_field, "gpt2 / llama .jsonl files: the text's key")
      ->capture_default_str();
  app.add_flag("--doc-mask", c.doc_mask,
               "gpt2 / llama: attention stays inside each document of a packed row");
  app.add_flag("--augment", c.augment,
               "image models: random flips and +-2 pixel shifts (a function of seed and step)");
  app.add_option("--image-size", c.image_size,
                 "image models: 32 (28x28 zero-padded), a multiple of 32 (then upsampled), or "
                 "28 (as they are; --stem=small only)")
      ->capture_default_str();
  app.add_option("--mean", c.pixel_mean,
                 "image models on --data: per-channel mean of pixel/255 (1 or 3 values; "
                 "default: measured on the training images)")
      ->delimiter(',');
  app.add_option("--std", c.pixel_std,
                 "image models on --data: per-channel standard deviation (as --mean)")
      ->delimiter(',');
  app.add_option("--masks", c.masks,
                 "unet on --data: masks folder parallel to --data (<class>/<name>.png, pixel = "
                 "class id; 0/255 = binary)");
  app.add_option("--cifar-labels", c.cifar_labels, "CIFAR-100 --data: fine (100) | coarse (20)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fine", "coarse"}));
  app.add_option("--classes", c.classes, "unet with --masks: classes (default: largest id + 1)")
      ->check(kPositive);
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
                 "transformer, gpt2, llama: write this run's data (the training examples, each "
                 "step's rows, the evaluated test examples), its settings and its initial weights "
                 "into this directory for benchmarks/translation_torch.py or lm_torch_train.py, "
                 "then exit without training");
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
                                    "v: cells per device for --schedule=interleaved, "
                                    "zb-interleaved or looped-bfs (cell c on device c mod K); "
                                    "zb-v, v-half, "
                                    "v-min and dualpipev imply 2")
                         ->capture_default_str()
                         ->check(CLI::Range(1, 64));
  g.planned.push_back(app.add_option("--M", c.M, "micro-batches per mini-batch")
                          ->capture_default_str()
                          ->check(CLI::Range(1, 1 << 20)));
  g.planned.push_back(g.virtual_stages);
  app.add_option("--order-latency", c.order_latency,
                 "the hop latency between devices, in a cell's forwards, that zb-v, "
                 "zb-interleaved, v-half and v-min place their order for (default: measured at "
                 "start-up; 0: free links; gpipe_plan prints it)")
      ->check(CLI::Range(0.0, 1000.0));
  g.planned.push_back(
      app.add_option(
             "--schedule", c.schedule,
             "gpipe | 1f1b | zb-h1 | zb-h1-lowmem | interleaved | zb-v | zb-interleaved | v-half | "
             "v-min | dualpipev | looped-bfs | file:PATH (a program in "
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

// The transformer reads the iso-codes catalogs (--data-dir, --languages) or
// the user's TSV files (--data and its tokenizers), not a mix.
void check_translation_data(const CLI::App& app, const TrainConfig& c) {
  if (c.data.empty()) {
    for (const char* f :
         {"--tokenizer", "--src-tokenizer", "--tgt-tokenizer", "--val-data", "--val-fraction"})
      usage(app.count(f) == 0, f,
            ": --model=transformer reads it with --data=TRAIN.tsv only (the iso-codes corpus "
            "has its own byte vocabulary and split)");
    return;
  }
  for (const char* f : {"--data-dir", "--languages", "--export-data"})
    usage(app.count(f) == 0, f,
          ": applies to the iso-codes corpus, not to --data's TSV files; drop one of them");
}

// Flags that do not apply to the chosen model, or contradict each other,
// are errors rather than silently ignored.
void check_combinations(const CLI::App& app, const TrainConfig& c, const Given& g) {
  if (c.model.empty())
    return;  // validate() says --model is required, before any model-specific check
  const std::vector<std::string> transformer_only = {
      "--logit-clip", "--scaled-init", "--languages", "--max-len", "--eval-sentences", "--samples"};
  struct Only {
    std::vector<std::string> flags;
    std::vector<std::string> models;
  };
  const std::vector<Only> only = {
      {transformer_only, {"transformer"}},
      {{"--preset", "--layers", "--ffn", "--heads", "--dim", "--dropout"},
       {"transformer", "gpt2", "llama"}},
      {{"--context", "--vocab", "--init-from", "--export-hf"}, {"gpt2", "llama"}},
      {{"--tokenizer"}, {"gpt2", "llama", "transformer"}},
      {{"--src-tokenizer", "--tgt-tokenizer"}, {"transformer"}},
      {{"--kv-heads"}, {"llama"}},
      {{"--data", "--val-data", "--val-fraction"},
       {"gpt2", "llama", "transformer", "amoebanet", "amoebanet-b", "resnet", "unet"}},
      {{"--mean", "--std", "--cifar-labels"}, {"amoebanet", "amoebanet-b", "resnet", "unet"}},
      {{"--masks", "--classes"}, {"unet"}},
      {{"--doc-split", "--text-field", "--doc-mask"}, {"gpt2", "llama"}},
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
  if (c.model == "transformer") check_translation_data(app, c);
  usage(!lm_model(c.model) || c.data.empty() || app.count("--data-dir") == 0,
        "--data-dir: names a folder of fortune files, the corpus --data replaces; give one or the "
        "other");
  usage(app.count("--val-data") == 0 || app.count("--val-fraction") == 0,
        "--val-data and --val-fraction: the held-out data is either given or a share of --data; "
        "give one or the other");
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
  // A Hugging Face folder names its architecture; --model may say it too.
  if (!c.init_from.empty()) {
    std::string arch;
    check_flag("--init-from", [&] { arch = read_hf_config(c.init_from).arch; });
    usage(c.model.empty() || c.model == arch, "--model=", c.model, ": '", c.init_from,
          "/config.json' is a ", arch, " model");
    c.model = arch;
  }
  check_combinations(app, c, g);
  if (lm_model(c.model)) {  // the language models' own defaults (models/lm.h)
    for (const auto& [flag, field] : {std::pair{"--layers", &c.layers},
                                      {"--ffn", &c.ffn},
                                      {"--heads", &c.heads},
                                      {"--dim", &c.dim}})
      if (app.count(flag) == 0) *field = 0;
    if (g.dropout->count() == 0) c.dropout = 0;
  }
  // The V schedules hold two cells on each device: resolve() implies
  // --virtual=2, so an explicit --virtual=1 is refused here.
  bool v_shape = false;
  try {
    v_shape = v_shaped(parse_schedule(c.schedule));
  } catch (const Error&) {
    // file:PATH or an unknown name (pipeline_options reports it)
  }
  usage(!(v_shape && g.virtual_stages->count() && c.virtual_stages == 1),
        "--virtual=1: " + c.schedule + " holds exactly 2 cells per device (leave --virtual out)");
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
