// A training task: a data set, the model that fits it, how its batches are
// made and how it is evaluated. Two tasks exist:
//
//   amoebanet, amoebanet-b, resnet
//                Fashion-MNIST, 28x28 padded to 32x32, normalised;
//                evaluation = test loss and accuracy.
//   unet         the same images; the target is each pixel's class,
//                foreground (raw intensity >= 0.5) or background;
//                evaluation = per-pixel loss, pixel accuracy and foreground IoU.
//   transformer  iso-codes many-to-English translation, byte tokens;
//                evaluation = held-out loss, token accuracy, and corpus chrF
//                of greedy translations of a fixed sample of test sources.
//
// Data order is a pure function of (seed, step): batch_at(s) is the s-th
// batch of the run (epoch s / E shuffled by the seed, E = batches per epoch,
// incomplete tail dropped), so a resumed run sees exactly the batches an
// uninterrupted one would, without replaying the ones before.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/bundle.h"
#include "data/seq2seq_vocab.h"
#include "data/text_tokenizer.h"
#include "layers/loss.h"
#include "models/amoebanet.h"
#include "models/resnet.h"
#include "models/transformer.h"
#include "models/unet.h"
#include "pipeline/pipeline.h"
#include "tools/train/config.h"

namespace gpipe::train {

struct SampleTranslation {
  std::string language, source, reference, hypothesis;
};

struct EvalResult {
  double loss = 0;                         // mean held-out loss (no label smoothing)
  int64_t examples = 0;                    // test examples the loss covers
  std::optional<double> accuracy;          // image models: top-1 (unet: pixel) accuracy in [0, 1]
  std::optional<double> iou;               // unet: foreground intersection over union
  std::optional<double> token_accuracy;    // transformer: teacher-forced next-byte accuracy
  std::optional<double> chrf;              // transformer: corpus chrF in [0, 100] of greedy outputs
  std::optional<double> perplexity;        // gpt2 / llama: exp(held-out loss per token)
  int64_t sentences = 0;                   // transformer: sentences decoded for chrF
  std::vector<SampleTranslation> samples;  // transformer: every decoded sentence, in order
  double seconds = 0;
};

// Which rows of an n-example training set make the batch of step s. Epoch
// e = s / E (E = n / batch, the incomplete tail dropped) walks
// epoch_order(n, seed, e); with `lengths` (one per example) the order is
// cut into windows of kLengthWindow batches, each window sorted by length
// (stable) and cut into batches, and the epoch's batches are then shuffled
// (seeded by (seed, e)): batches of similar lengths waste little on padding
// and the order stays random. Thread-safe (the prefetch thread calls it);
// the current epoch's batches are cached.
class StepRows {
 public:
  static constexpr int64_t kLengthWindow = 32;
  StepRows(int64_t n, int64_t batch, uint64_t seed, std::vector<int64_t> lengths = {});
  std::vector<int64_t> rows(int64_t step) const;
  int64_t batches_per_epoch() const { return n_ / batch_; }
  int64_t examples() const { return n_; }
  int64_t batch() const { return batch_; }
  uint64_t seed() const { return seed_; }

 private:
  void build_epoch(int64_t epoch) const;

  int64_t n_, batch_;
  uint64_t seed_;
  std::vector<int64_t> lengths_;
  mutable std::mutex mu_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<std::vector<int64_t>> batches_;  // of cached_epoch_
};

class Task {
 public:
  virtual ~Task() = default;
  // One line on the data: sizes, languages, preprocessing.
  virtual std::string describe() const = 0;
  virtual Model make_model() const = 0;
  virtual int64_t train_size() const = 0;
  // The batch of step `step` (0-based); thread-safe.
  virtual Batch batch_at(int64_t step) const = 0;
  // Evaluates `pipe` on the test split (eval mode for the call).
  virtual EvalResult evaluate(Pipeline& pipe) const = 0;
  // True if throughput is also reported in tokens (target bytes) per second.
  virtual bool counts_tokens() const = 0;
  // Checkpoint metadata: what the model and the data order depend on.
  virtual std::map<std::string, std::string> metadata() const = 0;
  // Checkpoint metadata on where the data stands when `step` steps are done
  // (batch_at(step) comes next): Note [Data position] in data_position.cc.
  // The default gives "data.examples" (train_size()), "data.fingerprint"
  // (metadata()'s "train.data") and, from step_rows(), "data.epoch",
  // "data.batch_in_epoch", "data.batches_per_epoch", "data.batch" and
  // "data.seed". A task that knows where its next row comes from adds
  // "data.next_source" (the LM task: "<file>:<line>"); one reading the
  // user's files may give a fingerprint of their names and sizes.
  virtual std::map<std::string, std::string> data_position(int64_t step) const;
  // What the data decides of the model, written into `c` (the trainer's
  // config, so its parameter count and report describe the model that
  // trains): the user's images' channels and classes. Nothing by default.
  virtual void apply_data_shape(TrainConfig& c) const { (void)c; }
  // --export-data: writes `dir`/data.json, everything a reference
  // implementation needs to train on exactly this run's data: the pairs,
  // each of `steps` steps' rows, the evaluated test rows, the tokenizer's
  // layout, the model's settings, `settings` (a JSON object from the trainer:
  // optimizer, schedule) and the eval-mode loss of step 0's batch under
  // `pipe`'s initial weights (a check for the reference). The translation
  // task and the language models have one (the latter also writes the
  // initial weights as `dir`/init-hf, a Hugging Face folder); the others
  // throw gpipe::Error.
  virtual void export_data(Pipeline& pipe, const std::string& settings, int64_t steps,
                           const std::string& dir) const;

 protected:
  // The training split's step -> rows map, for the default data_position
  // (nullptr: no epoch figures).
  virtual const StepRows* step_rows() const { return nullptr; }
};

// --resume: compares the data position `saved` (a checkpoint's metadata,
// read from `path`) with `task`'s at `step`. Throws gpipe::Error naming each
// key that differs when the data set changed ("data.examples",
// "data.fingerprint", or "data.next_source" with the same batch, seed and
// epoch length); returns warnings for an order that differs otherwise (another
// --batch or --seed). A checkpoint without "data." keys passes.
std::vector<std::string> check_data_position(const std::map<std::string, std::string>& saved,
                                             const Task& task, int64_t step,
                                             const std::string& path);

// Loads the data `c` names (throws gpipe::Error naming a missing directory
// or file). `c` must have passed resolve_defaults.
std::unique_ptr<Task> make_task(const TrainConfig& c);
std::unique_ptr<Task> make_image_task(const TrainConfig& c);  // tools/train/image_task.cc
// The image models on --data (a class-folder tree or CIFAR batches).
std::unique_ptr<Task> make_image_data_task(const TrainConfig& c);  // image_data_task.cc
std::unique_ptr<Task> make_translation_task(
    const TrainConfig& c);                                 // tools/train/translation_task.cc
std::unique_ptr<Task> make_lm_task(const TrainConfig& c);  // tools/train/lm_task.cc
// --model=transformer --data=TRAIN.tsv: tools/train/tsv_translation_task.cc.
std::unique_ptr<Task> make_tsv_translation_task(const TrainConfig& c);
// The vocabulary of --data's seq2seq model: --src-tokenizer / --tgt-tokenizer,
// each defaulting to --tokenizer (read once per process, text_tokenizer()).
Seq2SeqVocab seq2seq_vocab(const TrainConfig& c);

// Seeds derived from --seed, one per use, so no two draw the same stream.
// Evaluation runs the test rows in chunks of this many training batches,
// each as one pipelined program with micro-batches of the training
// micro-batch's size: few fill-drain bubbles, the same per-micro-batch work.
constexpr int64_t kEvalChunkBatches = 8;
int eval_micro_batches(const TrainConfig& c, int64_t rows);

uint64_t data_seed(const TrainConfig& c);     // epoch shuffles, augmentation
uint64_t dropout_seed(const TrainConfig& c);  // the pipeline's dropout keys
uint64_t weight_seed(const TrainConfig& c);   // initial weights

// Throws gpipe::Error "<flag>: directory '<dir>' does not exist" unless `dir` is one.
void require_directory(const std::string& dir, const char* flag);

// Puts the pipeline's layers in eval mode for its lifetime (Pipeline::predict
// runs in whatever mode the layers are in).
class EvalMode {
 public:
  explicit EvalMode(Pipeline& pipe) : pipe_(pipe) { pipe_.train(false); }
  ~EvalMode() { pipe_.train(true); }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;

 private:
  Pipeline& pipe_;
};

// The model configs `c` describes, without loading any data: the
// transformer's vocabulary is the byte tokenizer's for c.languages (the
// paper's 32k when `paper_vocab` and a preset is given), its max_len covers
// --max-len plus the language tag / BOS / EOS.
models::TransformerConfig transformer_config(const TrainConfig& c, bool paper_vocab = false);
// gpt2 / llama: lm_config with the tokenizer's vocabulary and the weights' seed.
models::LmConfig lm_model_config(const TrainConfig& c);
// The tokenizer `spec` names (data/text_tokenizer.h), read once per process
// and shared (encode and decode are const and thread-safe).
std::shared_ptr<const TextTokenizer> text_tokenizer(const std::string& spec);
models::AmoebaNetConfig amoebanet_config(const TrainConfig& c);  // D, or B for amoebanet-b
models::ResNetConfig resnet_config(const TrainConfig& c);
models::UNetConfig unet_config(const TrainConfig& c);
// The model --model names, built from its config (weights from --seed).
Model make_model(const TrainConfig& c);
int64_t parameter_count(const TrainConfig& c);  // from the formula, nothing allocated
// "ResNet-50 (W=16, 3x3 stem)", "U-Net(B=4, C=16, 2 convs per block)", "AmoebaNet-D(N=1, F=32)"
std::string model_title(const TrainConfig& c);
// c.languages, or the default ten.
std::vector<std::string> languages_of(const TrainConfig& c);

}  // namespace gpipe::train
