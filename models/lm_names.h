// The map between gpipe's parameter names of a language model (models/lm.h)
// and a Hugging Face checkpoint's (GPT2LMHeadModel, LlamaForCausalLM): one
// table per family, with the transposes and splits spelled out beside the
// names they apply to. Loading and saving read the same table, so a round
// trip is exact by construction.
//
//   gpt2: Conv1D weights are stored [in, out] (transposed against gpipe's
//         [out, in]); c_attn holds Q, K and V side by side on the out axis.
//   llama: gpipe rotates halves of each head as Hugging Face's Llama does,
//          so Q and K need no permutation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/lm.h"

namespace gpipe::models {

struct HfSlot {
  std::string name;        // the Hugging Face tensor ("transformer.h.0.attn.c_attn.weight")
  bool transpose = false;  // stored [in, out]
  // The gpipe tensor is rows [begin, begin + rows) of the Hugging Face one's
  // out axis (after the transpose); rows 0 = all of it.
  int64_t begin = 0, rows = 0;
};

// The slot of one gpipe parameter ("h.3.attn.attn.q.weight"), or nullopt for
// a name the family does not have. A tied output projection ("head.wte") maps
// to the token table.
std::optional<HfSlot> hf_slot(const LmConfig& c, const std::string& gpipe_name);

// gpipe's tensor from the Hugging Face one (any float dtype; float32 out).
Tensor from_hf(const Tensor& hf, const HfSlot& slot);

// The Hugging Face tensor from the gpipe tensors of its slots, in slot order
// (Q, K, V for c_attn); float32, contiguous.
Tensor to_hf(const std::vector<std::pair<HfSlot, Tensor>>& parts);

// Tensors a published checkpoint may hold that gpipe has no use for (GPT-2's
// causal-mask buffers "h.N.attn.bias" / "masked_bias", rotary caches).
bool hf_ignored(const std::string& hf_name);

}  // namespace gpipe::models
