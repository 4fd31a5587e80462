// What the two tasks share: the (seed, step) -> rows map, the seeds, the
// model configs and the factory.
#include "tools/train/task.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "core/rng.h"
#include "data/batch.h"
#include "data/text_tokenizer.h"
#include "data/translation.h"

namespace gpipe::train {

StepRows::StepRows(int64_t n, int64_t batch, uint64_t seed, std::vector<int64_t> lengths)
    : n_(n), batch_(batch), seed_(seed), lengths_(std::move(lengths)) {
  GPIPE_CHECK(batch >= 1, "--batch: expected a positive size, got ", batch);
  GPIPE_CHECK(n >= batch, "--batch: the training split has ", n,
              " examples, fewer than one batch of ", batch, " (expected --batch <= ", n, ")");
  GPIPE_ASSERT(lengths_.empty() || static_cast<int64_t>(lengths_.size()) == n);
}

void StepRows::build_epoch(int64_t epoch) const {
  const std::vector<int64_t> order = epoch_order(n_, seed_, epoch, /*shuffle=*/true);
  const int64_t count = batches_per_epoch();
  batches_.assign(count, {});
  if (lengths_.empty()) {
    for (int64_t b = 0; b < count; ++b)
      batches_[b].assign(order.begin() + b * batch_, order.begin() + (b + 1) * batch_);
    return;
  }
  std::vector<std::vector<int64_t>> sorted;
  for (int64_t w = 0; w < count; w += kLengthWindow) {
    const int64_t w_end = std::min(count, w + kLengthWindow);
    std::vector<int64_t> window(order.begin() + w * batch_, order.begin() + w_end * batch_);
    std::stable_sort(window.begin(), window.end(),
                     [&](int64_t a, int64_t b) { return lengths_[a] < lengths_[b]; });
    for (int64_t b = 0; b < w_end - w; ++b)
      sorted.emplace_back(window.begin() + b * batch_, window.begin() + (b + 1) * batch_);
  }
  const std::vector<int64_t> shuffle =
      permutation(count, mix_key(mix_key(seed_, 0xba7c), static_cast<uint64_t>(epoch)));
  for (int64_t b = 0; b < count; ++b) batches_[b] = std::move(sorted[shuffle[b]]);
}

std::vector<int64_t> StepRows::rows(int64_t step) const {
  GPIPE_ASSERT(step >= 0);
  const int64_t epoch = step / batches_per_epoch();
  std::lock_guard<std::mutex> lock(mu_);
  if (epoch != cached_epoch_) {
    build_epoch(epoch);
    cached_epoch_ = epoch;
  }
  return batches_[step % batches_per_epoch()];
}

int eval_micro_batches(const TrainConfig& c, int64_t rows) {
  const int64_t micro_rows = std::max<int64_t>(1, c.batch / std::max(1, c.M));
  return static_cast<int>(std::max<int64_t>(1, (rows + micro_rows - 1) / micro_rows));
}

uint64_t data_seed(const TrainConfig& c) { return mix_key(c.seed, 0xda7a); }
uint64_t dropout_seed(const TrainConfig& c) { return mix_key(c.seed, 0xd209); }
uint64_t weight_seed(const TrainConfig& c) { return mix_key(c.seed, 0x3e1); }

void Task::export_data(Pipeline&, const std::string&, int64_t, const std::string&) const {
  throw Error(
      "--export-data: only the translation task and the language models (--model=transformer, "
      "gpt2, llama) export their data");
}

void require_directory(const std::string& dir, const char* flag) {
  struct stat st {};
  GPIPE_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), flag, ": directory '", dir,
              "' does not exist (expected ",
              std::string(flag) == "--data-dir" ? "the data set's directory" : "a directory", ")");
}

std::vector<std::string> languages_of(const TrainConfig& c) {
  return c.languages.empty() ? default_translation_languages() : c.languages;
}

models::TransformerConfig transformer_config(const TrainConfig& c, bool paper_vocab) {
  models::TransformerConfig t;
  if (!c.preset.empty()) {
    t = models::transformer_preset(c.preset);
    if (paper_vocab) return t;
  } else {
    t.layers = c.layers;
    t.ffn = c.ffn;
    t.heads = c.heads;
    t.dim = c.dim;
  }
  t.vocab =
      c.data.empty() ? ByteTokenizer(languages_of(c)).vocab_size() : seq2seq_vocab(c).vocab_size();
  t.pad_id = ByteTokenizer::kPad;
  t.max_len = c.max_len + 1;  // language tag + source bytes; BOS + target bytes
  t.dropout = c.dropout;
  t.label_smoothing = label_smoothing_of(c);
  t.logit_clip = c.logit_clip;
  t.scaled_init = c.scaled_init;
  t.seed = weight_seed(c);
  return t;
}

models::AmoebaNetConfig amoebanet_config(const TrainConfig& c) {
  models::AmoebaNetConfig a;
  a.genotype =
      c.model == "amoebanet-b" ? models::AmoebaNetGenotype::kB : models::AmoebaNetGenotype::kD;
  a.num_normal_cells = c.normal_cells;
  a.filters = c.filters;
  a.in_channels = c.data_channels > 0 ? c.data_channels : 1;
  a.num_classes = c.data_classes > 0 ? c.data_classes : 10;
  a.small_input = c.stem == "small";
  a.seed = weight_seed(c);
  return a;
}

models::ResNetConfig resnet_config(const TrainConfig& c) {
  models::ResNetConfig r;
  r.depth = c.resnet_depth;
  r.width = c.resnet_width;
  r.in_channels = c.data_channels > 0 ? c.data_channels : 1;
  r.num_classes = c.data_classes > 0 ? c.data_classes : 10;
  r.small_input = c.image_size == 32;
  r.split_blocks = c.split_blocks;
  r.seed = weight_seed(c);
  return r;
}

models::UNetConfig unet_config(const TrainConfig& c) {
  models::UNetConfig u;
  u.depth = c.unet_depth;
  u.base_channels = c.unet_channels;
  u.convs_per_block = c.unet_convs;
  u.in_channels = c.data_channels > 0 ? c.data_channels : 1;
  u.num_classes = c.data_classes > 0 ? c.data_classes : 2;
  u.seed = weight_seed(c);
  return u;
}

namespace {
Model make_image_model(const TrainConfig& c) {
  if (c.model == "resnet") return models::resnet(resnet_config(c));
  if (c.model == "unet") return models::unet(unet_config(c));
  return models::amoebanet(amoebanet_config(c));
}
}  // namespace

std::shared_ptr<const TextTokenizer> text_tokenizer(const std::string& spec) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const TextTokenizer>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<const TextTokenizer>& t = loaded[spec];
  if (!t) t = make_text_tokenizer(spec);
  return t;
}

models::LmConfig lm_model_config(const TrainConfig& c) {
  models::LmConfig m = lm_config(c, text_tokenizer(c.tokenizer)->vocab_size());
  m.seed = weight_seed(c);
  if (c.doc_mask) m.document_eot = text_tokenizer(c.tokenizer)->eot_id();
  return m;
}

Model make_model(const TrainConfig& c) {
  if (c.model == "transformer") return models::transformer(transformer_config(c));
  if (lm_model(c.model)) return models::language_model(lm_model_config(c));
  Model m = make_image_model(c);
  // The zoo's image models end in a plain CrossEntropyLoss.
  if (const double eps = label_smoothing_of(c); eps > 0)
    m.loss = std::make_shared<CrossEntropyLoss>(CrossEntropyLossOptions{.label_smoothing = eps});
  return m;
}

int64_t parameter_count(const TrainConfig& c) {
  if (c.model == "transformer") return models::transformer_parameter_count(transformer_config(c));
  if (lm_model(c.model)) return models::lm_parameter_count(lm_model_config(c));
  if (c.model == "resnet") return models::resnet_parameter_count(resnet_config(c));
  if (c.model == "unet") return models::unet_parameter_count(unet_config(c));
  return models::amoebanet_parameter_count(amoebanet_config(c));
}

std::string model_title(const TrainConfig& c) {
  if (c.model == "resnet") {
    const models::ResNetConfig r = resnet_config(c);
    return detail::concat("ResNet-", r.depth, " (W=", r.width,
                          r.small_input ? ", 3x3 stem" : ", 7x7 stem",
                          r.split_blocks ? ", blocks split in 3 layers" : "", ")");
  }
  if (c.model == "unet") {
    const models::UNetConfig u = unet_config(c);
    return detail::concat("U-Net(B=", u.depth, ", C=", u.base_channels, ", ", u.convs_per_block,
                          " convs per block)");
  }
  const models::AmoebaNetConfig a = amoebanet_config(c);
  return detail::concat("AmoebaNet-", c.model == "amoebanet-b" ? "B" : "D",
                        "(N=", a.num_normal_cells, ", F=", a.filters, ")",
                        a.small_input ? " with the small-input stem" : "");
}

std::unique_ptr<Task> make_task(const TrainConfig& c) {
  if (lm_model(c.model)) return make_lm_task(c);
  return image_model(c.model) ? make_image_task(c) : make_translation_task(c);
}

}  // namespace gpipe::train
