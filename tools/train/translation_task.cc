// The Transformer on iso-codes many-to-English translation (data/translation.h),
// byte tokens with a language tag on the source.
//
// Pairs whose source or target exceeds --max-len bytes are dropped, so no
// batch is ever truncated. Evaluation walks the test split in one fixed
// shuffled order (independent of --seed, so runs are comparable): the
// held-out loss (plain cross-entropy, no label smoothing) and token accuracy
// over the first --eval-batches batches' worth of it, and chrF of greedy
// translations of its first --eval-sentences sources. Training batches are
// length-bucketed (StepRows), which roughly halves the padding.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/allocator.h"
#include "data/batch.h"
#include "data/metrics.h"
#include "data/translation.h"
#include "data/translation_batch.h"
#include "tools/train/metrics_log.h"
#include "tools/train/seq2seq_eval.h"
#include "tools/train/task.h"

namespace gpipe::train {
namespace {

constexpr uint64_t kEvalOrderSeed = 0x7e57;  // fixed: the same test sample for every run

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

int64_t pair_length(const TranslationPair& p) {
  return static_cast<int64_t>(std::max(p.source.size(), p.target.size()));
}

std::string json_ints(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(v[i]);
  }
  return out + "]";
}

// [[language, source, target], ...]
std::string json_pairs(const std::vector<TranslationPair>& pairs) {
  std::string out = "[";
  for (size_t i = 0; i < pairs.size(); ++i) {
    out += i ? ",\n[" : "\n[";
    out += json_string(pairs[i].language) + "," + json_string(pairs[i].source) + "," +
           json_string(pairs[i].target) + "]";
  }
  return out + "]";
}

class TranslationTask final : public Task {
 public:
  explicit TranslationTask(const TrainConfig& c)
      : c_(c), dir_(c.data_dir.empty() ? kLocaleDir : c.data_dir) {
    require_directory(dir_, "--data-dir");
    TranslationCorpusOptions o;
    o.locale_dir = dir_;
    o.languages = languages_of(c);
    o.max_bytes = c.max_len;
    corpus_ = load_translation_corpus(o);
    if (c.train_limit > 0 && c.train_limit < static_cast<int64_t>(corpus_.train.size())) {
      // A slice spread over every language (the corpus is grouped by language).
      const std::vector<int64_t> pick =
          permutation(static_cast<int64_t>(corpus_.train.size()), kEvalOrderSeed);
      std::vector<TranslationPair> slice;
      for (int64_t i = 0; i < c.train_limit; ++i) slice.push_back(corpus_.train[pick[i]]);
      corpus_.train = std::move(slice);
    }
    GPIPE_CHECK(!corpus_.test.empty(), "--data-dir: the corpus in '", dir_, "' has no test pairs");
    tokenizer_ = std::make_unique<ByteTokenizer>(corpus_.tokenizer());
    batch_opt_ = seq2seq_batch_options(c, c.max_len + 1);  // tag + bytes
    std::vector<int64_t> lengths;
    for (const TranslationPair& p : corpus_.train) lengths.push_back(pair_length(p));
    rows_ = std::make_unique<StepRows>(static_cast<int64_t>(corpus_.train.size()), c.batch,
                                       data_seed(c), std::move(lengths));
    const Seq2SeqEvalRows eval =
        seq2seq_eval_rows(c, static_cast<int64_t>(corpus_.test.size()), kEvalOrderSeed,
                          [&](int64_t row) { return pair_length(corpus_.test[row]); });
    eval_order_ = eval.loss_rows;
    decode_order_ = eval.decode_rows;
  }

  std::string describe() const override {
    std::ostringstream os;
    os << "iso-codes translation from " << dir_ << " (" << join(corpus_.languages, ",")
       << " -> en): " << corpus_.train.size() << " training, " << corpus_.test.size()
       << " test pairs of at most " << c_.max_len << " bytes; vocabulary "
       << tokenizer_->vocab_size() << " (bytes + tags); " << rows_->batches_per_epoch()
       << " batches of " << c_.batch << " per epoch";
    return os.str();
  }

  Model make_model() const override { return models::transformer(transformer_config(c_)); }
  int64_t train_size() const override { return static_cast<int64_t>(corpus_.train.size()); }
  bool counts_tokens() const override { return true; }

  Batch batch_at(int64_t step) const override {
    MemoryCategoryGuard cat(MemoryCategory::kWorkspace);
    return to_batch(
        make_translation_batch(corpus_.train, rows_->rows(step), *tokenizer_, batch_opt_));
  }

  EvalResult evaluate(Pipeline& pipe) const override {
    Seq2SeqEvalSpec spec;
    spec.loss_rows = eval_order_;
    spec.decode_rows = decode_order_;
    spec.max_tgt_len = batch_opt_.max_tgt_len;
    spec.batch = [&](const std::vector<int64_t>& rows) {
      return make_translation_batch(corpus_.test, rows, *tokenizer_, batch_opt_);
    };
    spec.sample = [&](int64_t row, const std::vector<int64_t>& output) {
      const TranslationPair& p = corpus_.test[row];
      return SampleTranslation{p.language, p.source, p.target, tokenizer_->decode(output)};
    };
    return evaluate_seq2seq(pipe, c_, spec);
  }

  void export_data(Pipeline& pipe, const std::string& settings, int64_t steps,
                   const std::string& dir) const override {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    GPIPE_CHECK(!ec, "--export-data: cannot create directory '", dir, "': ", ec.message());
    const models::TransformerConfig t = transformer_config(c_);
    JsonLine model;
    model.add("layers", t.layers).add("ffn", t.ffn).add("heads", t.heads).add("dim", t.dim);
    model.add("vocab", t.vocab).add("pad_id", t.pad_id).add("max_len", t.max_len);
    model.add("dropout", t.dropout).add("label_smoothing", t.label_smoothing);
    model.add("logit_clip", t.logit_clip).add("scaled_init", t.scaled_init);
    GPIPE_CHECK(t.activation == Activation::kRelu,
                "--export-data: the reference knows the ReLU feed-forward only");
    model.add("activation", "relu");
    JsonLine tokens;
    tokens.add("pad", ByteTokenizer::kPad).add("bos", ByteTokenizer::kBos);
    tokens.add("eos", ByteTokenizer::kEos).add("unk", ByteTokenizer::kUnk);
    tokens.add("first_tag", ByteTokenizer::kNumSpecial);
    tokens.add("first_byte", tokenizer_->byte_id(0)).add("vocab", tokenizer_->vocab_size());
    std::string languages = "[";
    for (size_t i = 0; i < corpus_.languages.size(); ++i) {
      if (i) languages += ',';
      languages += json_string(corpus_.languages[i]);
    }
    languages += "]";
    // The check: step 0's batch (the one training starts with) in eval mode,
    // no dropout, under the initial weights.
    const Batch b0 = batch_at(0);
    const Tensor &src = b0.inputs[0], &tgt_in = b0.inputs[1], &tgt_out = b0.targets[0];
    double check_loss = 0;
    {
      EvalMode eval(pipe);
      const Bundle out =
          pipe.predict(b0.inputs, {.micro_batches = eval_micro_batches(c_, src.size(0))});
      CrossEntropyLoss loss(CrossEntropyLossOptions{.ignore_index = ByteTokenizer::kPad});
      const Tensor labels = tgt_out.to(out[0].device());
      check_loss = loss.sum(out, {labels}).item() / loss.count({labels});
    }
    JsonLine check;
    check.add_json("src", json_ints(src.to_vector<int64_t>()));
    check.add_json("tgt_in", json_ints(tgt_in.to_vector<int64_t>()));
    check.add_json("tgt_out", json_ints(tgt_out.to_vector<int64_t>()));
    check.add_json("shape", json_ints({src.size(0), src.size(1), tgt_in.size(1)}));
    check.add("eval_loss", check_loss);
    std::string step_rows = "[";
    for (int64_t s = 0; s < steps; ++s) {
      step_rows += s ? ",\n" : "\n";
      step_rows += json_ints(rows_->rows(s));
    }
    step_rows += "]";
    JsonLine all;
    all.add("format", "gpipe-translation-export/1");
    all.add("describe", describe());
    all.add_json("languages", languages).add_json("tokens", tokens.str());
    all.add("max_src_len", batch_opt_.max_src_len).add("max_tgt_len", batch_opt_.max_tgt_len);
    all.add("batch", c_.batch).add("steps", steps).add("eval_chunk", kEvalChunkBatches * c_.batch);
    all.add_json("model", model.str()).add_json("settings", settings);
    all.add_json("check", check.str());
    all.add_json("eval_rows", json_ints(eval_order_));
    all.add_json("decode_rows", json_ints(decode_order_));
    all.add_json("test", json_pairs(corpus_.test));
    all.add_json("train", json_pairs(corpus_.train));
    all.add_json("step_rows", step_rows);
    const std::string path = (std::filesystem::path(dir) / "data.json").string();
    std::ofstream f(path, std::ios::trunc);
    f << all.str() << "\n";
    f.close();
    GPIPE_CHECK(f.good(), "--export-data: cannot write '", path, "'");
  }

  std::map<std::string, std::string> metadata() const override {
    const models::TransformerConfig t = transformer_config(c_);
    return {
        {"train.data", detail::concat("iso-codes languages=", join(corpus_.languages, ","),
                                      " max_len=", c_.max_len, " train_limit=", c_.train_limit)},
        {"train.model_config",
         detail::concat("transformer L=", t.layers, " H=", t.ffn, " A=", t.heads, " dim=", t.dim,
                        " vocab=", t.vocab, " dropout=", t.dropout,
                        " label_smoothing=", t.label_smoothing, " logit_clip=", t.logit_clip,
                        " scaled_init=", t.scaled_init)}};
  }

 private:
  const StepRows* step_rows() const override { return rows_.get(); }

  TrainConfig c_;
  std::string dir_;
  TranslationCorpus corpus_;
  std::unique_ptr<ByteTokenizer> tokenizer_;
  TranslationBatchOptions batch_opt_;
  std::unique_ptr<StepRows> rows_;
  std::vector<int64_t> eval_order_;    // test pairs for the held-out loss, by length
  std::vector<int64_t> decode_order_;  // test pairs decoded for chrF, in random order
};

}  // namespace

std::unique_ptr<Task> make_translation_task(const TrainConfig& c) {
  if (!c.data.empty()) return make_tsv_translation_task(c);
  return std::make_unique<TranslationTask>(c);
}

}  // namespace gpipe::train
