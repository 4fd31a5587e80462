// TrainConfig: everything gpipe_train can be told, and the one function that
// turns its command line into a config (main and the tests both use it).
//
//   TrainConfig c = parse_train_flags({"--model=amoebanet", "--steps=100"});
//   TrainSummary s = train(c, std::cout);   // tools/train/trainer.h
//
// Fields left at their "model default" value (empty string, std::nullopt, 0
// where noted) are filled by resolve_defaults() from this per-model table
// (also printed by --help):
//
//                    transformer                  amoebanet
//   --optimizer      adam                         sgd (Nesterov)
//   --lr             2e-3                         0.05
//   --lr-schedule    cosine:total=S,warmup=S/10   cosine:total=S,warmup=S/50
//   --weight-decay   0                            5e-4
//   --momentum       - (adam takes none)          0.9
//   --batch          32                           128
//   budget           --steps=600                  --epochs=2   (when neither is given)
//
// (S = the run's total number of steps.)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/lm.h"
#include "pipeline/options.h"
#include "pipeline/schedule.h"

namespace gpipe::train {

// A flag the trainer cannot honour: bad value, bad combination, a flag that
// does not apply to the chosen model. main exits with status 2 for these
// (1 for every other gpipe::Error, e.g. a missing or corrupt file).
class UsageError : public Error {
 public:
  using Error::Error;
};

// --help: `text` is the usage to print (main exits 0).
struct HelpRequested {
  std::string text;
};

struct TrainConfig {
  // ---- model ----
  // "transformer" | "amoebanet" (AmoebaNet-D) | "amoebanet-b" | "resnet" |
  // "unet" (required); every model but the transformer trains on Fashion-MNIST.
  std::string model;
  bool print_params = false;
  bool print_schedule = false;
  std::string schedule_svg;  // with or as --print-schedule: the planned program's picture (unit
                             // clock)  // print the step's program and its dry run, then exit
  // Transformer: a paper preset "T(6,8192,16)" (dim 1024; the byte vocabulary
  // replaces the paper's 32k when training) or explicit sizes.
  std::string preset;
  int64_t layers = 6, ffn = 512, heads = 4, dim = 128;
  double dropout = 0.1;
  // Cross-entropy label smoothing; unset = the model's default (0.1 for the
  // transformer, 0 for the image models): label_smoothing_of().
  std::optional<double> label_smoothing;
  double logit_clip = 0.0;
  bool scaled_init = false;
  // AmoebaNet-D / -B (N, F).
  int64_t normal_cells = 1;
  int64_t filters = 32;
  std::string stem = "paper";  // "small": AmoebaNetConfig::small_input (28-32 px images)
  // ResNet-50/101/152 with W-wide stem (32x32 inputs: a 3x3 stride-1 stem);
  // split_blocks: three layers per block, the shortcut a skip.
  int64_t resnet_depth = 50, resnet_width = 16;
  bool split_blocks = false;
  // U-Net(B, C), units per block; trained on the foreground mask of each image.
  int64_t unet_depth = 4, unet_channels = 16, unet_convs = 2;
  // ---- language models (gpt2 | llama): --preset, --layers --dim --heads --ffn
  // --dropout above, 0 for a size = the model's small default ----
  int64_t kv_heads = 0;  // grouped-query attention's K / V heads (0: the model's)
  int64_t vocab = 0;     // 0: the tokenizer's
  int64_t context = 0;   // tokens per row (0: 128; a preset's table stays its own)
  std::string tokenizer = "bytes";
  // transformer with --data: the source / target side's own tokenizer ("" = --tokenizer)
  std::string src_tokenizer, tgt_tokenizer;
  std::string init_from;  // a Hugging Face model folder: its config and weights
  std::string export_hf;  // at the end: the weights as a Hugging Face model folder

  // ---- data ----
  std::string data_dir;  // "" = /usr/share/locale or /usr/share/datasets/fashion-mnist
  // --data=PATH...: files, folders (recursively, in name order) and globs of
  // the task's own data (gpt2 / llama: .txt, .jsonl, llm.c .bin shards;
  // data/text_source.h); empty = the task's default corpus.
  std::vector<std::string> data;
  std::string val_data;             // held-out data (same forms as --data); "" = a share of --data
  double val_fraction = 0.05;       // the held-out share, by document, when --val-data is not given
  std::string doc_split = "file";   // gpt2 / llama .txt: file (one document) | blank (blank lines)
  std::string text_field = "text";  // gpt2 / llama .jsonl: the key holding a record's text
  bool doc_mask = false;  // gpt2 / llama: attention stays inside each document of a packed row
  std::vector<std::string> languages;  // transformer; empty = default_translation_languages()
  int64_t max_len = 32;     // transformer: longest source / target in bytes (tokens with --data)
  int64_t train_limit = 0;  // > 0: train on the first N training examples only (tests)
  bool augment = false;     // amoebanet: random flips and +-2 pixel shifts
  int64_t image_size = 32;  // 32 (padded), 64, 96, ... (then upsampled), 28 (--stem=small only)
  // Image models on --data (a class-folder tree or CIFAR batches; data/image_folder.h):
  std::vector<double> pixel_mean, pixel_std;  // --mean / --std per channel; empty = measured
  std::string masks;                          // unet: a mask folder parallel to --data
  std::string cifar_labels = "fine";          // CIFAR-100: fine (100 classes) | coarse (20)
  int64_t classes = 0;                        // unet with --masks: class count (0 = from the masks)

  // ---- optimisation ----
  int64_t batch = 0;  // N; 0 = model default
  int64_t steps =
      0;  // total steps of the run (resumed steps included); 0 = use epochs or the default budget
  int64_t epochs = 0;  // alternative to steps: epochs * batches per epoch
  std::optional<double> lr;
  std::string lr_schedule;  // optim/lr_schedule.h spec; "" = model default
  std::string optimizer;    // adam | adamw | sgd | rmsprop; "" = model default
  std::optional<double> weight_decay;
  std::optional<double> momentum;
  double clip_norm = 0.0;  // 0 = off
  uint64_t seed = 1;
  int threads = 0;  // intra-op threads per stage; 0 = cores / K

  // ---- evaluation, checkpoints, logs ----
  int64_t eval_every = 0;       // 0 = only at the end
  int64_t eval_batches = 0;     // 0 = the whole test split
  int64_t eval_sentences = 50;  // transformer: sentences greedily decoded for chrF
  int64_t samples = 3;          // transformer: sample translations printed at the end
  bool final_eval = true;
  std::string save;        // checkpoint path ("" = none)
  int64_t save_every = 0;  // 0 = only at the end
  std::string resume;      // checkpoint to continue from
  std::string metrics;     // JSON-lines file ("" = none)
  std::string plot;        // SVG of this run's loss, lr, throughput and evaluations ("" = none)
  // transformer: write the run's data, settings and initial weights to this
  // directory (for benchmarks/translation_torch.py) and exit without training.
  std::string export_data;
  int64_t log_every = 10;

  // ---- pipeline ----
  int K = 1;               // devices of one pipeline (one cell each unless --virtual)
  int virtual_stages = 1;  // v: cells per device (--schedule=interleaved)
  int M = 1;               // micro-batches per mini-batch
  // gpipe | 1f1b | zb-h1 | zb-h1-lowmem | interleaved | zb-v | zb-interleaved | v-half | v-min |
  // dualpipev | file:PATH
  std::string schedule = "gpipe";
  // The hop latency, in a cell's forwards, the cost-built orders are placed for
  // (--order-latency); < 0: measured at start-up (Note [Measured link latency]).
  double order_latency = -1;
  std::string remat = "except_last";
  // fp32 | bf16 | fp16 (Note [Mixed precision] in core/precision.h).
  std::string precision = "fp32";
  // auto (dynamic under fp16, none otherwise) | dynamic | dynamic:INITIAL | none | a fixed
  // positive scale.
  std::string loss_scale = "auto";
  std::string balance;              // "4,4,3,3" (overrides balance_by)
  std::string balance_by = "cost";  // cost | time | memory | plan (the planner's cuts)
  std::string skips = "direct";     // direct | through-cells: how skips between cells travel
  // --plan=auto: the planner (pipeline/plan.h) chooses M, the schedule, each
  // cell's remat mode and the cuts for --K devices, --batch and --memory.
  std::string plan;
  std::string memory;    // per-device memory limit for the planner ("16GB"; "" = none)
  std::string devices;   // "cpu:0,cpu:1" or a count; "" = cpu:0..cpu:K-1
  std::string trace;     // Chrome trace file written at the end
  double timeout = 600;  // seconds a stage waits for a neighbour (or a collective) before failing
  double watchdog = 0;  // a step longer than this prints what each stage waits for; 0 = timeout / 2

  // ---- processes (mpirun -np K*R gpipe_train ...; Note [Processes] in docs/ARCHITECTURE.md) ----
  int replicas = 1;                 // R: data-parallel copies of the K-stage pipeline
  std::string layout = "pipeline";  // pipeline | stage: which ranks form one pipeline
  bool sync_batchnorm = true;  // sum BatchNorm statistics over replicas (--no-sync-bn: per replica)

  // ---- set by the trainer, not flags: the training data this process consumes ----
  bool train_inputs = true;   // the first stage's
  bool train_targets = true;  // the last stage's
  // The image models' input channels and classes; set by the image task from
  // its data (0 = Fashion-MNIST's 1 and 10, or 2 for unet's foreground).
  int64_t data_channels = 0, data_classes = 0;

  // ---- set by parse_train_flags, not a flag ----
  // The pipeline flags' options, resolved once (resolve_pipeline); null in a
  // config built in code (the trainer resolves it then). Whoever changes a
  // parsed config's pipeline flags resets it.
  std::shared_ptr<const ResolvedOptions> pipeline;
};

// Parses gpipe_train's arguments (without the program name). Throws
// UsageError "--flag: what was wrong (expected ...)" for anything it cannot
// honour, HelpRequested for --help. The result has passed validate().
TrainConfig parse_train_flags(const std::vector<std::string>& args);

// Every option's value after parsing `args`, as one text that does not
// depend on flag order or spelling (--K=2 and --K 2 alike): what the ranks of
// a multi-process job compare. Throws as parse_train_flags does.
std::string canonical_flags(const std::vector<std::string>& args);

// Value and combination checks that need no data (also run by train()).
// Throws UsageError naming the flag.
void validate(const TrainConfig& c);
// The pipeline's options as the flags give them (the caller adds the
// communicator, the fault hook and the dropout seed); a --schedule=file:PATH
// program is read here. Throws UsageError naming the flag of a bad value.
PipelineOptions pipeline_options(const TrainConfig& c);
// resolve() (pipeline/options.h) with the flags' names in its messages
// (--K, --virtual, ...), as UsageError; the first also checks that the
// model has a layer per cell.
ResolvedOptions resolve_pipeline(PipelineOptions options);
ResolvedOptions resolve_pipeline(const TrainConfig& c);
OptionNames flag_names();

// --loss-scale resolved against --precision: dynamic (optim::LossScaler from
// `scale`) or a fixed scale (1 = none). Throws gpipe::Error for anything else.
struct LossScaleSetting {
  bool dynamic;
  double scale;
};
LossScaleSetting loss_scale_setting(const TrainConfig& c);

// Fills the model-default fields (see the table above); needs the number of
// batches per epoch when steps come from epochs.
TrainConfig resolve_defaults(TrainConfig c, int64_t batches_per_epoch);

// The model's default --batch (32 transformer, 128 the image models).
int64_t default_batch(const std::string& model);
// True for the models that train on Fashion-MNIST (all but the transformer).
bool image_model(const std::string& model);
bool lm_model(const std::string& model);  // gpt2 | llama
// The language model `c` describes (gpt2 | llama): a preset's, or the small
// default with the size flags given; the vocabulary is --vocab, else
// `tokenizer_vocab` (the bytes tokenizer's 257 when 0). No seed is set.
models::LmConfig lm_config(const TrainConfig& c, int64_t tokenizer_vocab = 0);

// --label-smoothing, or the model's default when it was not given.
double label_smoothing_of(const TrainConfig& c);

// Layers in the model's flat list (the most cells K can have).
int64_t model_layer_count(const TrainConfig& c);

}  // namespace gpipe::train
