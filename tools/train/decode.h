// Greedy autoregressive decoding through a pipeline.
//
// Starting from tgt = [BOS], repeatedly runs the model and appends the argmax
// of the last position's logits, until every row has produced EOS or tgt has
// max_len positions. Cached (the default): one DecodeSession for the whole
// generation, so the encoder runs once and each step feeds only the newest
// token through the decoder, whose self-attention keeps its keys and values
// (layers/decode.h): one position of work per step. Full re-run: each step
// runs Pipeline::predict({src, tgt}) on the whole prefix (the reference the
// cached form is tested against). Call it with the pipeline in eval mode
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
enum class DecodeMode { kCached, kFullRerun };
std::vector<std::vector<int64_t>> greedy_decode(Pipeline& pipe, const Tensor& src, int64_t max_len,
                                                int64_t bos, int64_t eos, int64_t pad,
                                                DecodeMode mode = DecodeMode::kCached);

}  // namespace gpipe::train
