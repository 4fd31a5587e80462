// Greedy autoregressive decoding through a pipeline.
//
// Starting from tgt = [BOS], repeatedly runs Pipeline::predict({src, tgt})
// and appends the argmax of the last position's logits, until every row has
// produced EOS or tgt has max_len positions. Each step recomputes the whole
// model on the prefix (no key/value cache): simple, and cheap at the byte
// lengths of the iso-codes names. Call it with the pipeline in eval mode
// (train::EvalMode).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "pipeline/pipeline.h"

namespace gpipe::train {

// src: [B, S] int64 token ids (PAD = 0) on the CPU. Returns, per row, the
// generated ids after BOS, up to and excluding the first EOS (all max_len of
// them if no EOS came). Throws gpipe::Error for max_len < 1.
std::vector<std::vector<int64_t>> greedy_decode(Pipeline& pipe, const Tensor& src, int64_t max_len,
                                                int64_t bos, int64_t eos, int64_t pad);

}  // namespace gpipe::train
