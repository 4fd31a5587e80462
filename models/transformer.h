// Transformer T(L, H, A): the encoder-decoder of the GPipe paper, written as
// one flat LayerList of 5L + 3 layers so a pipeline can cut it at every
// residual sublayer:
//
//   src_embed                            (src_tok, tgt_tok)        -> (src_h, src_pad, tgt_tok)
//   encoder_i.self_attn, encoder_i.ffn   (src_h, src_pad, tgt_tok) -> same, src_h updated
//   tgt_embed                            (src_h, src_pad, tgt_tok) -> (memory = LN(src_h), src_pad,
//   tgt_h) decoder_i.self_attn, .cross_attn, .ffn  (memory, src_pad, tgt_h) -> same, tgt_h updated
//   output                               (memory, src_pad, tgt_h)  -> (logits [B, T, V])
//
// (i = 0..L-1) followed by CrossEntropyLoss on labels [B, T] (padding
// ignored). Each sublayer is pre-LayerNorm, x += dropout(f(LN(x))); one embedding table E is shared
// by the source embedding, the target embedding and the output projection (logits = LN(y) E^T).
// src_pad is [B, S] float, 1 at padded source positions.
#pragma once

#include <cstdint>
#include <string>

#include "layers/basic.h"
#include "layers/loss.h"

namespace gpipe::models {

struct TransformerConfig {
  int64_t layers = 6;  // L: encoder layers (and as many decoder layers)
  int64_t ffn = 8192;  // H: feed-forward hidden size
  int64_t heads = 16;  // A: attention heads
  int64_t dim = 1024;  // model dimension
  int64_t vocab = 32000;
  int64_t pad_id = 0;     // token id of padding (ignored by the loss and masked in attention)
  int64_t max_len = 512;  // longest sequence the sinusoidal table covers
  double dropout = 0.0;   // residual, attention and embedding dropout
  double label_smoothing = 0.0;
  double logit_clip = 0.0;   // > 0: soft-clip logits to (-c, c)
  bool scaled_init = false;  // scale residual-branch weights by 1/sqrt(2L)
  // The output projection computed inside the loss, with no [N, T, vocab]
  // logits in training (CrossEntropyLossOptions::fuse_projection).
  bool fused_loss = true;
  Activation activation = Activation::kRelu;
  uint64_t seed = 0;
};

// The paper's sizes: "T(6,8192,16)", "T(24,8192,16)", "T(12,16384,32)",
// "T(32,16384,32)", "T(64,16384,32)" (dim 1024, vocab 32000). Throws naming
// the known presets for anything else.
TransformerConfig transformer_preset(const std::string& name);

// Exact parameter count from the config alone (the tied table counted once).
int64_t transformer_parameter_count(const TransformerConfig& c);

// Layers in transformer(c)'s flat list, 5L + 3: the most cells K can have.
int64_t transformer_layer_count(const TransformerConfig& c);

Model transformer(const TransformerConfig& c);

}  // namespace gpipe::models
