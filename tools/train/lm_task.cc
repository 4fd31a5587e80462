// GPT-2 and Llama (models/lm.h) on a text corpus: by default the fortunes
// of Debian's `fortunes` package (about 1.3 MB of English text in some
// 14,000 short documents: real prose, quotations, verse and dialogue, small
// enough to train on in minutes on 2 cores; --data-dir names another folder
// of fortune files). Documents are split 95 / 5 into training and held-out
// sets (by a hash of their index), tokenised (--tokenizer, bytes by default)
// and packed into rows of --context + 1 tokens with the end-of-text id
// between documents (data/lm_corpus.h). A step's rows come from StepRows, a
// pure function of (seed, step), so a resumed run sees the batches an
// uninterrupted one would. Evaluation: the held-out loss (mean over tokens)
// and its perplexity, over the first --eval-batches batches of the held-out
// rows in order.
#include <chrono>
#include <cmath>
#include <sstream>

#include "core/allocator.h"
#include "data/lm_corpus.h"
#include "tools/train/task.h"

namespace gpipe::train {
namespace {

constexpr double kHeldOut = 0.05;
constexpr uint64_t kSplitSeed = 0x1e57;  // fixed: the same held-out documents for every run

class LmTask final : public Task {
 public:
  explicit LmTask(const TrainConfig& c)
      : c_(c),
        dir_(c.data_dir.empty() ? kFortunesDir : c.data_dir),
        tok_(text_tokenizer(c.tokenizer)),
        model_(lm_model_config(c)) {
    require_directory(dir_, "--data-dir");
    GPIPE_CHECK(model_.vocab >= tok_->vocab_size(), "--vocab=", model_.vocab, ": smaller than the ",
                tok_->name(), " tokenizer's vocabulary of ", tok_->vocab_size(), " (ids up to ",
                tok_->vocab_size() - 1, " would have no row in the model)");
    GPIPE_CHECK(c.init_from.empty() || model_.vocab == tok_->vocab_size(),
                "--tokenizer=", c.tokenizer, ": its vocabulary of ", tok_->vocab_size(),
                " disagrees with the ", model_.vocab, " of '", c.init_from,
                "/config.json' (give the checkpoint's own tokenizer.json)");
    const int64_t context = c.context > 0 ? c.context : std::min<int64_t>(model_.context, 128);
    std::vector<Document> train, val;
    split_documents(read_fortunes(dir_), kHeldOut, kSplitSeed, train, val);
    if (c.train_limit > 0 && static_cast<int64_t>(train.size()) > c.train_limit)
      train.resize(static_cast<size_t>(c.train_limit));
    train_ = pack(train, *tok_, context);
    val_ = pack(val, *tok_, context);
    GPIPE_CHECK(train_.rows >= c.batch, "the corpus in '", dir_, "' makes ", train_.rows,
                " training rows of ", context + 1, " tokens, fewer than --batch=", c.batch);
    rows_ = std::make_unique<StepRows>(train_.rows, c.batch, data_seed(c));
  }

  std::string describe() const override {
    std::ostringstream os;
    os << "text from " << dir_ << ": " << train_.documents << " training documents ("
       << train_.text_bytes / 1000 << " kB), " << val_.documents << " held out; tokenizer "
       << tok_->name() << " (vocabulary " << tok_->vocab_size() << "); rows of " << train_.context
       << " tokens: " << train_.rows << " training, " << val_.rows << " held out; "
       << (c_.model == "gpt2" ? "GPT-2" : "Llama") << " L=" << model_.layers << " d=" << model_.dim
       << " heads=" << model_.heads;
    if (c_.model == "llama") os << " kv-heads=" << model_.kv();
    os << " ffn=" << model_.ffn << " vocab=" << model_.vocab << "; " << rows_->batches_per_epoch()
       << " batches of " << c_.batch << " per epoch";
    return os.str();
  }

  Model make_model() const override { return models::language_model(model_); }
  int64_t train_size() const override { return train_.rows; }
  bool counts_tokens() const override { return true; }

  Batch batch_at(int64_t step) const override {
    const std::vector<int64_t> rows = rows_->rows(step);
    Batch b;
    if (c_.train_inputs) b.inputs = {lm_inputs(train_, rows)};
    if (c_.train_targets) b.targets = {lm_targets(train_, rows)};
    return b;
  }

  EvalResult evaluate(Pipeline& pipe) const override {
    const auto t0 = std::chrono::steady_clock::now();
    EvalResult r;
    const int64_t n = val_.rows;
    const int64_t limit = c_.eval_batches > 0 ? std::min(n, c_.eval_batches * c_.batch) : n;
    double sum = 0;
    for (int64_t first = 0; first < limit; first += c_.batch) {
      std::vector<int64_t> rows;
      for (int64_t i = first; i < std::min(limit, first + c_.batch); ++i) rows.push_back(i);
      const Batch b{{lm_inputs(val_, rows)}, {lm_targets(val_, rows)}};
      sum += pipe.evaluate(b, eval_micro_batches(c_, static_cast<int64_t>(rows.size()))) *
             static_cast<double>(rows.size());
    }
    r.examples = limit;
    r.loss = limit > 0 ? sum / static_cast<double>(limit) : 0.0;
    r.perplexity = std::exp(r.loss);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }

  std::map<std::string, std::string> metadata() const override {
    return {{"train.data", detail::concat("lm ", dir_, " tokenizer=", tok_->name(), " context=",
                                          train_.context, " train_limit=", c_.train_limit)},
            {"train.model_config",
             detail::concat(c_.model, " L=", model_.layers, " d=", model_.dim,
                            " heads=", model_.heads, " kv=", model_.kv(), " ffn=", model_.ffn,
                            " vocab=", model_.vocab, " context=", model_.context)}};
  }

 private:
  TrainConfig c_;
  std::string dir_;
  std::shared_ptr<const TextTokenizer> tok_;
  models::LmConfig model_;
  PackedRows train_, val_;
  std::unique_ptr<StepRows> rows_;
};

}  // namespace

std::unique_ptr<Task> make_lm_task(const TrainConfig& c) { return std::make_unique<LmTask>(c); }

}  // namespace gpipe::train
