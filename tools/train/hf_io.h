// Hugging Face model folders in and out for gpipe's language models
// (Note [Hugging Face folders] in hf_io.cc):
//
//   DIR/config.json                      GPT2LMHeadModel or LlamaForCausalLM
//   DIR/model.safetensors                one file, or
//   DIR/model-0000i-of-0000n.safetensors shards, with
//   DIR/model.safetensors.index.json     {"weight_map": {tensor: shard file}}
//
// Every error is one gpipe::Error naming the file and, where there is one,
// the tensor or the config key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/bundle.h"
#include "models/lm.h"

namespace gpipe::train {

// DIR/config.json as gpipe's model: model_type gpt2 or llama; rope_theta and
// rope_scaling (type llama3) as the published checkpoints write them, or
// rope_parameters as transformers 5 does. Throws naming the file and the key
// for anything gpipe cannot build.
models::LmConfig read_hf_config(const std::string& dir);

// Fills `state` (this rank's named parameters, as Pipeline::named_state
// gives them) from DIR's safetensors; reads only the shards that hold them.
// Throws for a missing tensor, a wrong shape or an unreadable shard.
void load_hf_weights(const std::string& dir, const models::LmConfig& c,
                     const std::vector<NamedTensor>& state);

// Writes DIR/config.json and the weights of `state` in float32, one
// model.safetensors, or shards of at most `shard_bytes` with the index.
// `eot_id`: the tokenizer's end-of-text id (bos / eos in the config).
void export_hf(const std::string& dir, const models::LmConfig& c,
               const std::vector<NamedTensor>& state, int64_t eot_id,
               int64_t shard_bytes = int64_t{2} << 30);

}  // namespace gpipe::train
