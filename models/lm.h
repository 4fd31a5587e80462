// Decoder-only language models: GPT-2 and Llama 3, one layer list built from
// shared sublayers (each x += f(norm(x))), their options in LmConfig.
//
//   gpt2:  token + learned position embeddings; pre-LayerNorm blocks with
//          biased projections; GELU (tanh approximation) MLP; a final
//          LayerNorm; the output projection tied to the token table.
//   llama: token embedding; RMSNorm; rotary Q and K (rope_theta, Llama 3.1
//          frequency scaling); grouped-query attention; SwiGLU MLP; no
//          biases; the output projection untied unless the config ties it.
//
// The layers, in order (2L + 2, each a cut point for the pipeline):
//   embed, h.0.attn, h.0.mlp, ..., h.{L-1}.attn, h.{L-1}.mlp, head
// With document_eot set, the embedding adds the tokens' document ids [B, T]
// (int64) to its output and every sublayer passes them on.
// Inputs: one int tensor of tokens [B, T] (T <= context); targets: the next
// tokens [B, T], `ignore_index` where no loss is wanted. The head hands its
// normalised states and output weight to the fused loss (no [B, T, vocab]
// logits in training).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "layers/basic.h"
#include "layers/loss.h"
#include "ops/rotary.h"

namespace gpipe::models {

struct LmConfig {
  std::string arch = "gpt2";  // gpt2 | llama
  int64_t layers = 4;         // L
  int64_t dim = 128;          // d_model
  int64_t heads = 4;
  int64_t kv_heads = 0;  // grouped-query attention's K / V heads; 0 = heads
  int64_t ffn = 512;     // the MLP's hidden width
  int64_t vocab = 257;
  int64_t context = 128;  // longest sequence (GPT-2's position table)
  double norm_eps = 1e-5;
  bool tied = true;           // output projection = token table
  ops::RotaryOptions rotary;  // llama: enabled
  double dropout = 0.0;       // embedding, attention and residual dropout
  int64_t ignore_index = -100;
  uint64_t seed = 0;
  // >= 0: attention stays inside each document of a packed row, a document
  // starting at each token with this id (the end-of-text id; Note [Document
  // mask] in models/lm.cc); -1: plain causal attention over the row.
  int64_t document_eot = -1;

  int64_t kv() const { return kv_heads > 0 ? kv_heads : heads; }
};

// The published sizes: gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-3.2-1b,
// llama-3.2-3b, llama-3.1-8b, llama-3.1-70b (Hugging Face's configs). Throws
// gpipe::Error listing them for any other name.
LmConfig lm_preset(const std::string& name);
std::vector<std::string> lm_preset_names();
// The defaults of `arch` (gpt2 | llama) at a small size that trains in
// minutes on 2 cores.
LmConfig lm_default(const std::string& arch);

// Exact parameter count (a tied table once), Hugging Face's num_parameters().
int64_t lm_parameter_count(const LmConfig& c);
int64_t lm_layer_count(const LmConfig& c);  // 2L + 2

// Throws gpipe::Error naming what is inconsistent (dim not divisible by
// heads, heads not a multiple of kv_heads, an odd head dim under rotary).
void check_lm_config(const LmConfig& c);
Model language_model(const LmConfig& c);

}  // namespace gpipe::models
