// The Transformer on the user's own translation pairs: --data=TRAIN.tsv...
// (data/translation_tsv.h) and --val-data=DEV.tsv, or a --val-fraction of
// the training pairs held out by target string (as the iso-codes corpus is
// split by its English side). Any TextTokenizer encodes each side
// (data/seq2seq_vocab.h); every pair is encoded once, here. Pairs whose
// source or target exceeds --max-len tokens are dropped and counted, so no
// batch is truncated. Training batches are length-bucketed (StepRows);
// evaluation is the iso-codes task's (tools/train/seq2seq_eval.h): held-out
// loss over a fixed sample of the validation pairs and chrF of greedy
// translations, decoded back to text.
#include <algorithm>
#include <filesystem>
#include <sstream>

#include "core/allocator.h"
#include "data/batch.h"
#include "data/translation.h"
#include "data/translation_batch.h"
#include "data/translation_tsv.h"
#include "tools/train/seq2seq_eval.h"
#include "tools/train/task.h"

namespace gpipe::train {
namespace {

constexpr uint64_t kEvalOrderSeed = 0x7e57;  // fixed: the same validation sample for every run
constexpr uint64_t kSplitSeed = 0;           // --val-fraction's split, independent of --seed

struct EncodedSet {
  std::vector<TranslationPair> text;  // the pairs kept, as read
  std::vector<EncodedPair> ids;       // the same pairs in model ids
  int64_t dropped = 0;                // pairs longer than --max-len tokens
};

int64_t pair_length(const EncodedPair& p) {
  return static_cast<int64_t>(std::max(p.src.size(), p.tgt.size()));
}

EncodedSet encode(std::vector<TranslationPair> pairs, const Seq2SeqVocab& vocab, int64_t max_len) {
  EncodedSet set;
  for (TranslationPair& p : pairs) {
    EncodedPair e{vocab.encode_source(p.source), vocab.encode_target(p.target)};
    if (pair_length(e) > max_len) {
      ++set.dropped;
      continue;
    }
    set.ids.push_back(std::move(e));
    set.text.push_back(std::move(p));
  }
  return set;
}

std::string files_text(const std::vector<std::string>& files) {
  std::string out;
  for (const std::string& f : files) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(f, ec);
    out += detail::concat(out.empty() ? "" : ",", f, ":", ec ? 0 : size);
  }
  return out;
}

class TsvTranslationTask final : public Task {
 public:
  explicit TsvTranslationTask(const TrainConfig& c) : c_(c), vocab_(seq2seq_vocab(c)) {
    std::vector<TranslationPair> train, val;
    for (const std::string& f : c.data) {
      std::vector<TranslationPair> pairs = read_translation_tsv(f);
      train.insert(train.end(), std::make_move_iterator(pairs.begin()),
                   std::make_move_iterator(pairs.end()));
    }
    if (!c.val_data.empty()) {
      val = read_translation_tsv(c.val_data);
    } else {
      std::vector<TranslationPair> kept;
      for (TranslationPair& p : train)
        (in_test_split(p.target, c.val_fraction, kSplitSeed) ? val : kept).push_back(std::move(p));
      train = std::move(kept);
      GPIPE_CHECK(!val.empty(), "--val-fraction=", c.val_fraction, " holds out none of --data's ",
                  train.size(), " pairs (expected some; give --val-data or a larger fraction)");
      GPIPE_CHECK(!train.empty(), "--val-fraction=", c.val_fraction, " holds out all of --data's ",
                  val.size(), " pairs (expected some left to train on)");
    }
    train_ = encode(std::move(train), vocab_, c.max_len);
    val_ = encode(std::move(val), vocab_, c.max_len);
    GPIPE_CHECK(!train_.ids.empty(), "--data: every one of its ", train_.dropped,
                " training pairs is longer than --max-len=", c.max_len,
                " tokens on one side (expected some that fit; raise --max-len)");
    GPIPE_CHECK(!val_.ids.empty(), "--val-data: every one of its ", val_.dropped,
                " validation pairs is longer than --max-len=", c.max_len,
                " tokens on one side (expected some that fit; raise --max-len)");
    if (c.train_limit > 0 && c.train_limit < static_cast<int64_t>(train_.ids.size())) {
      const std::vector<int64_t> pick =
          permutation(static_cast<int64_t>(train_.ids.size()), kEvalOrderSeed);
      EncodedSet slice;
      for (int64_t i = 0; i < c.train_limit; ++i) {
        slice.text.push_back(train_.text[pick[i]]);
        slice.ids.push_back(train_.ids[pick[i]]);
      }
      slice.dropped = train_.dropped;
      train_ = std::move(slice);
    }
    batch_opt_ = seq2seq_batch_options(c, c.max_len);
    std::vector<int64_t> lengths;
    for (const EncodedPair& p : train_.ids) lengths.push_back(pair_length(p));
    rows_ = std::make_unique<StepRows>(static_cast<int64_t>(train_.ids.size()), c.batch,
                                       data_seed(c), std::move(lengths));
    const Seq2SeqEvalRows eval =
        seq2seq_eval_rows(c, static_cast<int64_t>(val_.ids.size()), kEvalOrderSeed,
                          [&](int64_t row) { return pair_length(val_.ids[row]); });
    eval_order_ = eval.loss_rows;
    decode_order_ = eval.decode_rows;
  }

  std::string describe() const override {
    std::ostringstream os;
    os << "translation pairs from " << join_files(c_.data) << ": " << train_.ids.size()
       << " training";
    if (train_.dropped) os << " (" << train_.dropped << " longer than --max-len dropped)";
    os << ", " << val_.ids.size() << " validation pairs";
    if (val_.dropped) os << " (" << val_.dropped << " dropped)";
    os << (c_.val_data.empty() ? " held out of --data" : " from " + c_.val_data) << "; tokenizer "
       << vocab_.describe() << ", model vocabulary " << vocab_.vocab_size()
       << " (pad, bos, eos, unk, then the tokenizer's); at most " << c_.max_len
       << " tokens a side; " << rows_->batches_per_epoch() << " batches of " << c_.batch
       << " per epoch";
    return os.str();
  }

  Model make_model() const override { return models::transformer(transformer_config(c_)); }
  int64_t train_size() const override { return static_cast<int64_t>(train_.ids.size()); }
  bool counts_tokens() const override { return true; }
  const StepRows* step_rows() const override { return rows_.get(); }

  Batch batch_at(int64_t step) const override {
    MemoryCategoryGuard cat(MemoryCategory::kWorkspace);
    return to_batch(make_translation_batch(train_.ids, rows_->rows(step), batch_opt_));
  }

  EvalResult evaluate(Pipeline& pipe) const override {
    Seq2SeqEvalSpec spec;
    spec.loss_rows = eval_order_;
    spec.decode_rows = decode_order_;
    spec.max_tgt_len = batch_opt_.max_tgt_len;
    spec.batch = [&](const std::vector<int64_t>& rows) {
      return make_translation_batch(val_.ids, rows, batch_opt_);
    };
    spec.sample = [&](int64_t row, const std::vector<int64_t>& output) {
      const TranslationPair& p = val_.text[row];
      return SampleTranslation{"", p.source, p.target, vocab_.decode_target(output)};
    };
    return evaluate_seq2seq(pipe, c_, spec);
  }

  std::map<std::string, std::string> metadata() const override {
    const models::TransformerConfig t = transformer_config(c_);
    return {{"train.data",
             detail::concat("tsv files=", files_text(c_.data), " val=",
                            c_.val_data.empty() ? detail::concat("fraction ", c_.val_fraction)
                                                : files_text({c_.val_data}),
                            " tokenizer=", vocab_.describe(), " max_len=", c_.max_len,
                            " train_limit=", c_.train_limit)},
            {"train.model_config",
             detail::concat("transformer L=", t.layers, " H=", t.ffn, " A=", t.heads,
                            " dim=", t.dim, " vocab=", t.vocab, " dropout=", t.dropout,
                            " label_smoothing=", t.label_smoothing, " logit_clip=", t.logit_clip,
                            " scaled_init=", t.scaled_init)}};
  }

 private:
  static std::string join_files(const std::vector<std::string>& files) {
    std::string out;
    for (const auto& f : files) out += (out.empty() ? "" : ", ") + f;
    return out;
  }

  TrainConfig c_;
  Seq2SeqVocab vocab_;
  EncodedSet train_, val_;
  TranslationBatchOptions batch_opt_;
  std::unique_ptr<StepRows> rows_;
  std::vector<int64_t> eval_order_;    // validation pairs for the held-out loss, by length
  std::vector<int64_t> decode_order_;  // validation pairs decoded for chrF, in random order
};

}  // namespace

Seq2SeqVocab seq2seq_vocab(const TrainConfig& c) {
  return Seq2SeqVocab(text_tokenizer(c.src_tokenizer.empty() ? c.tokenizer : c.src_tokenizer),
                      text_tokenizer(c.tgt_tokenizer.empty() ? c.tokenizer : c.tgt_tokenizer));
}

std::unique_ptr<Task> make_tsv_translation_task(const TrainConfig& c) {
  return std::make_unique<TsvTranslationTask>(c);
}

}  // namespace gpipe::train
