// GPT-2 and Llama (models/lm.h) on a text corpus: by default the fortunes
// of Debian's `fortunes` package (about 1.3 MB of English text in some
// 14,000 short documents: real prose, quotations, verse and dialogue, small
// enough to train on in minutes on 2 cores; --data-dir names another folder
// of fortune files), or the user's own files (--data: .txt, .jsonl and llm.c
// .bin shards, data/text_source.h). Documents are split into training and
// held-out sets (--val-fraction, 5% by default, by a hash of their index;
// or --val-data), tokenised (--tokenizer, bytes by default) and packed into
// rows of --context + 1 tokens with the end-of-text id between documents
// (data/lm_corpus.h). A shard is already tokens: its rows are windows read
// from the map (data/lm_rows.h), its held-out share the tail after an
// end-of-text token. A step's rows come from StepRows, a pure function of
// (seed, step), so a resumed run sees the batches an uninterrupted one
// would. Evaluation: the held-out loss (mean over tokens) and its
// perplexity, over the first --eval-batches batches of the held-out rows in
// order.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/allocator.h"
#include "data/lm_rows.h"
#include "data/text_source.h"
#include "tools/train/hf_io.h"
#include "tools/train/metrics_log.h"
#include "tools/train/task.h"

namespace gpipe::train {
namespace {

// 64-bit FNV-1a of `text`, as 16 hex digits.
std::string fnv1a_hex(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char ch : text) h = (h ^ ch) * 0x100000001b3ull;
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

constexpr uint64_t kSplitSeed = 0x1e57;  // fixed: the same held-out documents for every run

// What one side (training or held-out) is read from.
struct Side {
  std::vector<Document> docs;
  std::vector<std::shared_ptr<const TokenShard>> shards;
};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

std::string json_ints(const int64_t* v, int64_t n) {
  std::string out = "[";
  for (int64_t i = 0; i < n; ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + "]";
}

// Row r's context + 1 tokens as a JSON list.
std::string json_row(const LmRows& rows, int64_t r) {
  std::vector<int64_t> tokens(static_cast<size_t>(rows.context() + 1));
  rows.row(r, tokens.data());
  return json_ints(tokens.data(), static_cast<int64_t>(tokens.size()));
}

class LmTask final : public Task {
 public:
  explicit LmTask(const TrainConfig& c)
      : c_(c),
        dir_(c.data_dir.empty() ? kFortunesDir : c.data_dir),
        tok_(text_tokenizer(c.tokenizer)),
        model_(lm_model_config(c)),
        context_(c.context > 0 ? c.context : std::min<int64_t>(model_.context, 128)),
        train_(context_),
        val_(context_) {
    if (c.data.empty()) require_directory(dir_, "--data-dir");
    GPIPE_CHECK(model_.vocab >= tok_->vocab_size(), "--vocab=", model_.vocab, ": smaller than the ",
                tok_->name(), " tokenizer's vocabulary of ", tok_->vocab_size(), " (ids up to ",
                tok_->vocab_size() - 1, " would have no row in the model)");
    GPIPE_CHECK(c.init_from.empty() || model_.vocab == tok_->vocab_size(),
                "--tokenizer=", c.tokenizer, ": its vocabulary of ", tok_->vocab_size(),
                " disagrees with the ", model_.vocab, " of '", c.init_from,
                "/config.json' (give the checkpoint's own tokenizer.json)");
    Side train, val;
    if (c.data.empty())
      train.docs = read_fortunes(dir_);
    else
      read_side(expand_data_paths(c.data, "--data"), train);
    if (!c.val_data.empty()) {
      read_side(expand_data_paths({c.val_data}, "--val-data"), val);
      files_ += "val:";
    } else {
      std::vector<Document> kept;
      split_documents(train.docs, c.val_fraction, kSplitSeed, kept, val.docs);
      train.docs = std::move(kept);
    }
    if (c.train_limit > 0 && static_cast<int64_t>(train.docs.size()) > c.train_limit)
      train.docs.resize(static_cast<size_t>(c.train_limit));
    add_rows(train, val, c.val_data.empty() ? c.val_fraction : 0.0);
    GPIPE_CHECK(train_.rows() >= c.batch, "the training data (", source_name(), ") makes ",
                train_.rows(), " rows of ", context_ + 1, " tokens, fewer than --batch=", c.batch);
    rows_ = std::make_unique<StepRows>(train_.rows(), c.batch, data_seed(c));
  }

  std::string describe() const override {
    std::ostringstream os;
    // "N training documents (B kB) and S training shard tokens, N held out and S held-out ..."
    auto side = [&](const Stats& st, bool training) {
      std::string out;
      if (st.docs > 0 || st.shard_tokens == 0)
        out = training ? detail::concat(st.docs, " training documents (", st.bytes / 1000, " kB)")
                       : detail::concat(st.docs, " held out");
      if (st.shard_tokens > 0)
        out += detail::concat(out.empty() ? "" : " and ", st.shard_tokens,
                              training ? " training shard tokens" : " held-out shard tokens");
      return out;
    };
    os << "text from " << source_name() << ": " << side(stats_[0], true) << ", "
       << side(stats_[1], false) << "; tokenizer " << tok_->name() << " (vocabulary "
       << tok_->vocab_size() << "); rows of " << context_ << " tokens: " << train_.rows()
       << " training, " << val_.rows() << " held out; " << (c_.model == "gpt2" ? "GPT-2" : "Llama")
       << " L=" << model_.layers << " d=" << model_.dim << " heads=" << model_.heads;
    if (c_.model == "llama") os << " kv-heads=" << model_.kv();
    os << " ffn=" << model_.ffn << " vocab=" << model_.vocab;
    if (c_.doc_mask) os << "; attention inside documents";
    os << "; " << rows_->batches_per_epoch() << " batches of " << c_.batch << " per epoch";
    return os.str();
  }

  Model make_model() const override { return models::language_model(model_); }
  int64_t train_size() const override { return train_.rows(); }
  bool counts_tokens() const override { return true; }

  Batch batch_at(int64_t step) const override {
    const std::vector<int64_t> rows = rows_->rows(step);
    Batch b;
    if (c_.train_inputs) b.inputs = {train_.inputs(rows)};
    if (c_.train_targets) b.targets = {train_.targets(rows)};
    return b;
  }

  EvalResult evaluate(Pipeline& pipe) const override {
    const auto t0 = std::chrono::steady_clock::now();
    EvalResult r;
    const int64_t n = val_.rows();
    const int64_t limit = c_.eval_batches > 0 ? std::min(n, c_.eval_batches * c_.batch) : n;
    double sum = 0;
    for (int64_t first = 0; first < limit; first += c_.batch) {
      std::vector<int64_t> rows;
      for (int64_t i = first; i < std::min(limit, first + c_.batch); ++i) rows.push_back(i);
      const Batch b{{val_.inputs(rows)}, {val_.targets(rows)}};
      sum += pipe.evaluate(b, eval_micro_batches(c_, static_cast<int64_t>(rows.size()))) *
             static_cast<double>(rows.size());
    }
    r.examples = limit;
    r.loss = limit > 0 ? sum / static_cast<double>(limit) : 0.0;
    r.perplexity = std::exp(r.loss);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }

  // For benchmarks/lm_torch_train.py: the rows each step trains on (each
  // distinct training row's tokens once, then the steps' row ids), the
  // evaluated held-out rows, the model's settings, and two losses under the
  // initial weights (step 0's batch and the held-out set, both in eval
  // mode); the weights themselves go to `dir`/init-hf as a Hugging Face folder.
  void export_data(Pipeline& pipe, const std::string& settings, int64_t steps,
                   const std::string& dir) const override {
    GPIPE_CHECK(!c_.doc_mask,
                "--export-data: the reference attends over the whole row; drop "
                "--doc-mask");
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    GPIPE_CHECK(!ec, "--export-data: cannot create directory '", dir, "': ", ec.message());
    export_hf((std::filesystem::path(dir) / "init-hf").string(), model_, pipe.named_state(),
              tok_->eot_id());
    JsonLine model;
    model.add("arch", c_.model).add("layers", model_.layers).add("dim", model_.dim);
    model.add("heads", model_.heads).add("kv_heads", model_.kv()).add("ffn", model_.ffn);
    model.add("vocab", model_.vocab).add("context", model_.context).add("tied", model_.tied);
    model.add("dropout", model_.dropout).add("ignore_index", model_.ignore_index);
    JsonLine check;
    check.add("step0_loss", pipe.evaluate(batch_at(0), eval_micro_batches(c_, c_.batch)));
    check.add("heldout_loss", evaluate(pipe).loss);
    std::string step_rows = "[";
    std::set<int64_t> used;
    for (int64_t s = 0; s < steps; ++s) {
      const std::vector<int64_t> rows = rows_->rows(s);
      used.insert(rows.begin(), rows.end());
      step_rows += (s ? ",\n" : "\n") + json_ints(rows.data(), static_cast<int64_t>(rows.size()));
    }
    step_rows += "]";
    std::string train = "[";
    for (int64_t r : used)
      train +=
          (train.size() > 1 ? ",\n[" : "\n[") + std::to_string(r) + "," + json_row(train_, r) + "]";
    train += "]";
    const int64_t n = val_.rows();
    const int64_t limit = c_.eval_batches > 0 ? std::min(n, c_.eval_batches * c_.batch) : n;
    std::string eval = "[";
    for (int64_t r = 0; r < limit; ++r) eval += (r ? ",\n" : "\n") + json_row(val_, r);
    eval += "]";
    JsonLine all;
    all.add("format", "gpipe-lm-export/1").add("describe", describe());
    all.add("batch", c_.batch).add("steps", steps).add("context", context_);
    all.add("eot_id", tok_->eot_id()).add("init_hf", "init-hf");
    all.add_json("model", model.str()).add_json("settings", settings);
    all.add_json("check", check.str());
    all.add_json("eval_rows", eval).add_json("train_rows", train).add_json("step_rows", step_rows);
    const std::string path = (std::filesystem::path(dir) / "data.json").string();
    std::ofstream f(path, std::ios::trunc);
    f << all.str() << "\n";
    f.close();
    GPIPE_CHECK(f.good(), "--export-data: cannot write '", path, "'");
  }

  std::map<std::string, std::string> metadata() const override {
    std::string data = detail::concat("lm ", source_name(), " tokenizer=", tok_->name(),
                                      " context=", context_, " train_limit=", c_.train_limit);
    if (!c_.data.empty())
      data += detail::concat(" val=", c_.val_data.empty() ? "fraction:" : c_.val_data,
                             c_.val_data.empty() ? std::to_string(c_.val_fraction) : "",
                             " doc_split=", c_.doc_split, " text_field=", c_.text_field);
    return {
        {"train.data", data},
        {"train.model_config",
         detail::concat(c_.model, " L=", model_.layers, " d=", model_.dim, " heads=", model_.heads,
                        " kv=", model_.kv(), " ffn=", model_.ffn, " vocab=", model_.vocab,
                        " context=", model_.context, c_.doc_mask ? " doc_mask" : "")}};
  }

  // The default position and where the next batch's first row starts
  // ("<file>:<line>", or a shard's token offset).
  std::map<std::string, std::string> data_position(int64_t step) const override {
    std::map<std::string, std::string> m = Task::data_position(step);
    // The user's files by name and size, so a file rewritten under its name is noticed.
    if (!files_.empty()) m["data.fingerprint"] += detail::concat(" files=", fnv1a_hex(files_));
    const std::string source = train_.source(rows_->rows(step).front(), *tok_);
    if (!source.empty()) m["data.next_source"] = source;
    return m;
  }

 private:
  const StepRows* step_rows() const override { return rows_.get(); }

  std::string source_name() const { return c_.data.empty() ? dir_ : join(c_.data); }

  void read_side(const std::vector<std::string>& files, Side& side) {
    const TextSourceOptions options{.doc_split = c_.doc_split, .text_field = c_.text_field};
    for (const std::string& f : files) {
      std::error_code ec;
      const uintmax_t bytes = std::filesystem::file_size(f, ec);
      files_ += detail::concat(f, ":", ec ? 0 : bytes, "\n");
      if (source_format(f) != SourceFormat::kShard) {
        std::vector<Document> docs = read_documents(f, options);
        side.docs.insert(side.docs.end(), std::make_move_iterator(docs.begin()),
                         std::make_move_iterator(docs.end()));
        continue;
      }
      auto shard = std::make_shared<const TokenShard>(f);
      // A uint16 shard fits a vocabulary of 65,536 whatever it holds; else one pass over the map.
      const bool fits = shard->token_bytes() == 2 && tok_->vocab_size() >= 65536;
      GPIPE_CHECK(fits || shard->max_id() < tok_->vocab_size(), "token shard '", f, "': holds id ",
                  shard->max_id(), ", beyond the ", tok_->name(), " tokenizer's vocabulary of ",
                  tok_->vocab_size(), " (give the --tokenizer the shard was written with)");
      side.shards.push_back(std::move(shard));
    }
  }

  // Packs each side's documents and adds its shards; with `held_out` > 0 the
  // tail of each training shard goes to the held-out rows.
  void add_rows(const Side& train, const Side& val, double held_out) {
    for (int side = 0; side < 2; ++side) {
      const Side& s = side == 0 ? train : val;
      LmRows& rows = side == 0 ? train_ : val_;
      if (!s.docs.empty()) {
        PackedRows p = pack(s.docs, *tok_, context_);
        stats_[side].docs = p.documents;
        stats_[side].bytes = p.text_bytes;
        rows.add_packed(std::move(p));
      }
      for (const auto& shard : s.shards) {
        const int64_t cut = side == 0 && held_out > 0
                                ? shard_split_point(*shard, held_out, tok_->eot_id())
                                : shard->size();
        rows.add_shard(shard, 0, cut);
        stats_[side].shard_tokens += cut;
        if (cut < shard->size()) {
          val_.add_shard(shard, cut, shard->size());
          stats_[1].shard_tokens += shard->size() - cut;
        }
      }
    }
  }

  struct Stats {
    int64_t docs = 0, bytes = 0, shard_tokens = 0;
  };
  TrainConfig c_;
  std::string dir_;
  std::string files_;  // --data (then --val-data) files: "path:bytes\n" each, in read order
  std::shared_ptr<const TextTokenizer> tok_;
  models::LmConfig model_;
  int64_t context_;
  LmRows train_, val_;
  Stats stats_[2];
  std::unique_ptr<StepRows> rows_;
};

}  // namespace

std::unique_ptr<Task> make_lm_task(const TrainConfig& c) { return std::make_unique<LmTask>(c); }

}  // namespace gpipe::train
