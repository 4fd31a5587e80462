// Multi-head attention and the position-wise feed-forward block.
#pragma once

#include "layers/basic.h"
#include "layers/decode.h"
#include "ops/rotary.h"

namespace gpipe {

struct AttentionOptions {
  int64_t dim = 512;     // model dimension D
  int64_t heads = 8;     // A; D must be divisible by it
  bool causal = false;   // decoder self-attention: query i sees keys j <= i
  double dropout = 0.0;  // on the attention probabilities
  double init_scale = 1.0;
  // Grouped-query attention: K and V have kv_heads heads of D / heads dims
  // each, head h of Q attending with K / V head h / (heads / kv_heads); 0 =
  // heads (multi-head). heads must be a multiple of it.
  int64_t kv_heads = 0;
  bool bias = true;           // the four projections' biases (Llama has none)
  ops::RotaryOptions rotary;  // rotary position embedding of Q and K (off by default)
};

// query [B, Tq, D], memory [B, Tk, D] (= query for self-attention),
// key_padding [B, Tk] float (1 = padded key, ignored) or undefined.
// Output [B, Tq, D]. Q, K, V and output projections (with bias unless
// options say otherwise); with rotary embedding, query and key positions
// start at 0 (at the cache's length when decoding incrementally).
class MultiHeadAttention final : public Layer {
 public:
  MultiHeadAttention(std::string name, AttentionOptions opt, uint64_t seed);
  // With `residual` ([B, Tq, D]) the result is residual + dropout(attention),
  // the dropout and add done in the output projection's epilogue (Note
  // [Fused residual] in models/transformer.cc).
  // With `segments` ([B, T] int; causal self-attention only) a query sees
  // only the keys of its own segment (ops::document_attention).
  Tensor attend(const Tensor& query, const Tensor& memory, const Tensor& key_padding = Tensor(),
                const Tensor& residual = Tensor(), const ops::FusedDropout& dropout = {},
                const Tensor& segments = Tensor());
  // Incremental decoding (layers/decode.h), eval mode. Self-attention:
  // `query` [B, t, D] holds the newest positions; their keys and values are
  // appended to the cache's and the queries attend over every cached
  // position (causally when t > 1). Over a fixed memory (cross-attention):
  // its keys and values are projected once per session and kept.
  Tensor attend_incremental(const Tensor& query, LayerDecodeCache& cache);
  Tensor attend_cached_memory(const Tensor& query, const Tensor& memory, const Tensor& key_padding,
                              LayerDecodeCache& cache);
  // Bundle form: (query[, memory[, key_padding]]) -> (out).
  Bundle forward(const Bundle& in) override;
  BundleSpec output_spec(const BundleSpec& in) const override;
  double cost(const BundleSpec& in) const override;
  // FLOPs for given sizes (projections + scores + weighted sum).
  double flops(int64_t batch, int64_t tq, int64_t tk) const;
  int64_t kv_heads() const { return opt_.kv_heads > 0 ? opt_.kv_heads : opt_.heads; }

 private:
  // Rotary embedding at `offset` (if on), then K / V heads repeated to Q's.
  Tensor rotate(const Tensor& x, int64_t heads, int64_t offset) const;
  Tensor repeat_kv(const Tensor& x) const;

  AttentionOptions opt_;
  Linear q_, k_, v_, o_;
  Dropout drop_;
};

// W2 (act(W1 x + b1)) + b2 over the last axis: [..., D] -> [..., D].
class FeedForward final : public UnaryLayer {
 public:
  FeedForward(std::string name, int64_t dim, int64_t hidden, Activation act, uint64_t seed,
              double dropout = 0.0, double init_scale = 1.0);
  Tensor forward(const Tensor& x) override;
  // residual + dropout(forward(x)), the dropout and add done in the second
  // product's epilogue (the inner dropout in the first's under ReLU).
  Tensor forward_residual(const Tensor& x, const Tensor& residual,
                          const ops::FusedDropout& dropout = {});
  TensorSpec output_spec(const TensorSpec& in) const override;
  double cost(const BundleSpec& in) const override;

 private:
  int64_t dim_, hidden_;
  Activation act_;
  Linear in_, out_;
  Dropout drop_;
};

// x + dropout(f(x)), or x + dropout(f(LN(x))) with pre-normalisation, for a
// UnaryLayer f. A Linear or FeedForward f does the dropout and add in its
// product's epilogue.
class Residual final : public UnaryLayer {
 public:
  Residual(std::string name, std::shared_ptr<UnaryLayer> inner, int64_t norm_dim = 0,
           double dropout = 0.0, uint64_t salt = 7);
  Tensor forward(const Tensor& x) override;
  TensorSpec output_spec(const TensorSpec& in) const override;
  double cost(const BundleSpec& in) const override;

 private:
  std::shared_ptr<UnaryLayer> inner_;
  std::unique_ptr<LayerNorm> norm_;
  Dropout drop_;
};

}  // namespace gpipe
