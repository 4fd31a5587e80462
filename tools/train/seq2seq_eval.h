// The translation tasks' evaluation, shared by the iso-codes corpus and the
// user's TSV files: held-out loss and token accuracy over some test rows,
// and corpus chrF of greedy translations of others.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "data/translation_batch.h"
#include "pipeline/pipeline.h"
#include "tools/train/config.h"
#include "tools/train/task.h"

namespace gpipe::train {

struct Seq2SeqEvalSpec {
  // Test rows for the loss (sorted by length: little padding), evaluated
  // kEvalChunkBatches batches at a time, and rows greedily decoded for chrF.
  std::vector<int64_t> loss_rows, decode_rows;
  int64_t max_tgt_len = 0;  // greedy decoding's cap, BOS included
  // The batch of some test rows.
  std::function<TranslationBatch(const std::vector<int64_t>& rows)> batch;
  // The sample of test row `row` given the model's output ids.
  std::function<SampleTranslation(int64_t row, const std::vector<int64_t>& output)> sample;
};

// A translation task's batches of --batch pairs: at most `max_src_len`
// source tokens and --max-len + 1 target tokens (BOS + tokens, tokens +
// EOS), rows taken in the order given (StepRows shuffles), none dropped.
TranslationBatchOptions seq2seq_batch_options(const TrainConfig& c, int64_t max_src_len);

// The evaluated rows of an n-row test split: `loss_rows`, a fixed random
// subset (permutation(n, seed); all n rows without --eval-batches, else
// the first --eval-batches batches' worth) sorted stably by length(row),
// so its batches carry little padding; `decode_rows`, the first
// --eval-sentences rows of the same random order.
struct Seq2SeqEvalRows {
  std::vector<int64_t> loss_rows, decode_rows;
};
Seq2SeqEvalRows seq2seq_eval_rows(const TrainConfig& c, int64_t n, uint64_t seed,
                                  const std::function<int64_t(int64_t row)>& length);

// Loss (plain cross-entropy, PAD ignored), token accuracy, chrF and every
// decoded sample, with `pipe` in eval mode for the call.
EvalResult evaluate_seq2seq(Pipeline& pipe, const TrainConfig& c, const Seq2SeqEvalSpec& spec);

}  // namespace gpipe::train
