// Text generation from a decoder-only language model through a pipeline
// (Note [Pipelined generation] in generate.cc): prompts of one length form a
// batch whose rows stream through the K cells as micro-batches; a KV cache per
// layer (layers/decode.h) makes each new token one position of work.
#pragma once

#include <cstdint>
#include <vector>

#include "pipeline/pipeline.h"

namespace gpipe::train {

struct SamplingOptions {
  int64_t max_new_tokens = 64;
  double temperature = 0;  // 0: greedy (argmax)
  int64_t top_k = 0;       // > 0: sample among the k most likely
  double top_p = 1;        // < 1: among the smallest set holding this probability
  uint64_t seed = 1;
  int64_t stop_id = -1;  // a row stops after emitting it (end-of-text); -1 = never
  bool cached = true;    // false: re-run the whole prefix each step (the reference)
};

// The new ids of each prompt (stop_id excluded), in the prompts' order.
// Prompts of equal length share a batch; each batch's rows are cut into
// min(rows, micro_batches) micro-batches. Call with the pipeline in eval
// mode. Throws gpipe::Error for an empty prompt, or a prompt plus
// max_new_tokens longer than `context`.
std::vector<std::vector<int64_t>> generate(Pipeline& pipe,
                                           const std::vector<std::vector<int64_t>>& prompts,
                                           const SamplingOptions& opt, int64_t context,
                                           int micro_batches);

// The next id from one row of logits under `opt` (greedy when temperature
// is 0); `draw` in [0, 1) picks the sample.
int64_t sample_next(const std::vector<float>& logits, const SamplingOptions& opt, double draw);

}  // namespace gpipe::train
