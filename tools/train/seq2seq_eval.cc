// Held-out loss in chunks of kEvalChunkBatches batches (one predict call
// each, split into eval_micro_batches micro-batches), then greedy decoding
// one batch of sentences at a time; chrF is over the whole decoded corpus.
#include "tools/train/seq2seq_eval.h"

#include <algorithm>
#include <chrono>

#include "core/allocator.h"
#include "data/batch.h"
#include "data/metrics.h"
#include "data/tokenizer.h"
#include "tools/train/decode.h"

namespace gpipe::train {

TranslationBatchOptions seq2seq_batch_options(const TrainConfig& c, int64_t max_src_len) {
  TranslationBatchOptions o;
  o.batch_size = c.batch;
  o.max_src_len = max_src_len;
  o.max_tgt_len = c.max_len + 1;
  o.shuffle = false;
  o.drop_last = false;
  return o;
}

Seq2SeqEvalRows seq2seq_eval_rows(const TrainConfig& c, int64_t n, uint64_t seed,
                                  const std::function<int64_t(int64_t row)>& length) {
  Seq2SeqEvalRows r;
  r.loss_rows = permutation(n, seed);
  r.decode_rows.assign(
      r.loss_rows.begin(),
      r.loss_rows.begin() + std::min<int64_t>(c.eval_sentences, r.loss_rows.size()));
  if (c.eval_batches > 0 && c.eval_batches * c.batch < static_cast<int64_t>(r.loss_rows.size()))
    r.loss_rows.resize(c.eval_batches * c.batch);
  std::stable_sort(r.loss_rows.begin(), r.loss_rows.end(),
                   [&](int64_t a, int64_t b) { return length(a) < length(b); });
  return r;
}

EvalResult evaluate_seq2seq(Pipeline& pipe, const TrainConfig& c, const Seq2SeqEvalSpec& spec) {
  const auto t0 = std::chrono::steady_clock::now();
  EvalMode eval(pipe);
  EvalResult r;
  CrossEntropyLoss loss(CrossEntropyLossOptions{.ignore_index = ByteTokenizer::kPad});
  const int64_t n = static_cast<int64_t>(spec.loss_rows.size());
  double sum = 0, terms = 0;
  AccuracyCount acc;
  const int64_t chunk = kEvalChunkBatches * c.batch;
  for (int64_t first = 0; first < n; first += chunk) {
    const std::vector<int64_t> rows(spec.loss_rows.begin() + first,
                                    spec.loss_rows.begin() + std::min(n, first + chunk));
    MemoryCategoryGuard cat(MemoryCategory::kWorkspace);
    const TranslationBatch b = spec.batch(rows);
    const int64_t count = static_cast<int64_t>(rows.size());
    const Bundle out =
        pipe.predict({b.src, b.tgt_in}, {.micro_batches = eval_micro_batches(c, count)});
    const Tensor labels = b.tgt_out.to(out[0].device());
    sum += loss.sum(out, {labels}).item();
    terms += loss.count({labels});
    const AccuracyCount a = count_correct(out[0], labels, ByteTokenizer::kPad);
    acc.correct += a.correct;
    acc.total += a.total;
    r.examples += count;
  }
  r.loss = terms > 0 ? sum / terms : 0.0;
  r.token_accuracy = acc.value();

  const int64_t sentences = static_cast<int64_t>(spec.decode_rows.size());
  ChrfAccumulator chrf;
  for (int64_t first = 0; first < sentences; first += c.batch) {
    const std::vector<int64_t> rows(
        spec.decode_rows.begin() + first,
        spec.decode_rows.begin() + std::min(sentences, first + c.batch));
    MemoryCategoryGuard cat(MemoryCategory::kWorkspace);
    const TranslationBatch b = spec.batch(rows);
    const auto hyps = greedy_decode(pipe, b.src, spec.max_tgt_len, ByteTokenizer::kBos,
                                    ByteTokenizer::kEos, ByteTokenizer::kPad);
    for (size_t i = 0; i < rows.size(); ++i) {
      SampleTranslation s = spec.sample(rows[i], hyps[i]);
      chrf.add(s.hypothesis, s.reference);
      r.samples.push_back(std::move(s));
    }
  }
  r.sentences = sentences;
  if (sentences > 0) r.chrf = chrf.score();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace gpipe::train
