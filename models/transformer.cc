#include "models/transformer.h"

#include <cmath>
#include <map>

#include "core/rng.h"
#include "layers/attention.h"
#include "ops/ops.h"

namespace gpipe::models {
namespace {

// Sinusoidal positions: PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(...).
Tensor sinusoid_table(int64_t len, int64_t dim) {
  std::vector<float> v(static_cast<size_t>(len * dim));
  for (int64_t p = 0; p < len; ++p)
    for (int64_t i = 0; i < dim; i += 2) {
      const double angle = p / std::pow(10000.0, static_cast<double>(i) / dim);
      v[p * dim + i] = static_cast<float>(std::sin(angle));
      if (i + 1 < dim) v[p * dim + i + 1] = static_cast<float>(std::cos(angle));
    }
  MemoryCategoryGuard cat(MemoryCategory::kParameter);
  return Tensor::from_vector(v, Shape{len, dim});
}

// x = E[tok] * sqrt(D) + PE[:T], then dropout.
class Embedder {
 public:
  Embedder(const TransformerConfig& c, Tensor* table) : c_(c), table_(table) {}
  // Positions [offset, offset + T) (offset > 0 when decoding incrementally).
  Tensor embed(const Tensor& tokens, Tensor& pe, Dropout& drop, int64_t offset = 0) {
    const int64_t t = tokens.size(1);
    GPIPE_CHECK(offset + t <= c_.max_len, "Transformer: sequence length ", offset + t,
                " exceeds max_len ", c_.max_len);
    if (pe.device() != table_->device()) pe = pe.to(table_->device());
    Tensor x =
        ops::mul_scalar(ops::embedding(*table_, tokens), std::sqrt(static_cast<double>(c_.dim)));
    return drop(ops::add(x, ops::narrow(pe, 0, offset, t)));
  }

 private:
  TransformerConfig c_;
  Tensor* table_;
};

void expect_tokens(const std::string& who, const TensorSpec& s) {
  GPIPE_CHECK(s.shape.rank() == 2 && is_integral(s.dtype), "layer '", who,
              "': expected int tokens [B, T], got ", s.dtype, s.shape);
}
void expect_hidden(const std::string& who, const TensorSpec& s, int64_t dim) {
  GPIPE_CHECK(s.shape.rank() == 3 && s.shape[2] == dim && is_floating(s.dtype), "layer '", who,
              "': expected hidden states [B, T, ", dim, "], got ", s.dtype, s.shape);
}

class SourceEmbedding final : public Layer {
 public:
  SourceEmbedding(const TransformerConfig& c, Tensor table)
      : Layer("src_embed"),
        table(std::move(table)),
        c_(c),
        pe_(sinusoid_table(c.max_len, c.dim)),
        drop_("dropout", c.dropout, 1),
        embed_(c, &this->table) {
    register_parameter("shared_embedding", &this->table);
    register_sublayer("dropout", &drop_);
  }
  Bundle forward(const Bundle& in) override {
    expect_inputs(spec_of(in), 2);
    // Incremental decoding: the source is the same at every step.
    LayerDecodeCache* cache = current_decode_cache();
    if (cache && cache->has("h")) return {cache->tensors["h"], cache->tensors["mask"], in[1]};
    Bundle out = embed_source(in);
    if (cache) {
      cache->tensors["h"] = out[0];
      cache->tensors["mask"] = out[1];
    }
    return out;
  }
  Bundle embed_source(const Bundle& in) {
    const Tensor& src = in[0];
    // 1.0 where the source token is padding (keys to ignore in attention).
    std::vector<float> pad;
    for (int64_t t : src.to_vector<int64_t>()) pad.push_back(t == c_.pad_id ? 1.f : 0.f);
    Tensor mask = Tensor::from_vector(pad, src.shape()).to(table.device());
    return {embed_.embed(src, pe_, drop_), mask, in[1]};
  }
  BundleSpec output_spec(const BundleSpec& in) const override {
    expect_inputs(in, 2);
    expect_tokens(name(), in[0]);
    expect_tokens(name(), in[1]);
    return {{Shape{in[0].shape[0], in[0].shape[1], c_.dim}, table.dtype()},
            {in[0].shape, table.dtype()},
            in[1]};
  }
  double cost(const BundleSpec&) const override { return 0.0; }
  Tensor table;

 private:
  TransformerConfig c_;
  Tensor pe_;
  Dropout drop_;
  Embedder embed_;
};

// One pre-LayerNorm residual sublayer, the unit the pipeline cuts at:
// stream += dropout(f(LN(stream))), with f self-attention, cross-attention
// (keys and values from the encoder memory) or the feed-forward block. An
// encoder layer is (self_attn, ffn), a decoder layer (self_attn, cross_attn,
// ffn): the same arithmetic as one layer object, cut finer. The bundle is
// (src_h, src_pad, tgt_tok) in the encoder and (memory, src_pad, tgt_h) in
// the decoder; `stream` says which slot the sublayer updates.
enum class SublayerKind { kSelfAttention, kCausalSelfAttention, kCrossAttention, kFeedForward };

class ResidualSublayer final : public Layer {
 public:
  ResidualSublayer(const TransformerConfig& c, std::string name, SublayerKind kind, size_t stream,
                   uint64_t seed, double scale)
      : Layer(std::move(name)),
        c_(c),
        kind_(kind),
        stream_(stream),
        norm_("norm", c.dim),
        drop_("dropout", c.dropout, 1) {
    register_sublayer("norm", &norm_);
    if (kind == SublayerKind::kFeedForward) {
      ffn_ =
          std::make_unique<FeedForward>("mlp", c.dim, c.ffn, c.activation, seed, c.dropout, scale);
      register_sublayer("mlp", ffn_.get());
    } else {
      attn_ = std::make_unique<MultiHeadAttention>(
          "attn",
          AttentionOptions{.dim = c.dim,
                           .heads = c.heads,
                           .causal = kind == SublayerKind::kCausalSelfAttention,
                           .dropout = c.dropout,
                           .init_scale = scale},
          seed);
      register_sublayer("attn", attn_.get());
    }
    register_sublayer("dropout", &drop_);
  }
  bool takes_16bit() const override { return true; }
  Bundle forward(const Bundle& in) override {
    expect_inputs(spec_of(in), 3);
    Bundle out = in;
    // Incremental decoding (layers/decode.h): an encoder sublayer's output is
    // the same at every step; the decoder's self-attention appends the newest
    // positions' keys and values, its cross-attention projects the memory once.
    LayerDecodeCache* cache = current_decode_cache();
    // After the first step an encoder sublayer passes its bundle through:
    // TargetEmbedding uses the memory it cached then, never in[0] again.
    if (cache && stream_ == 0 && cache->position > 0) return out;
    const Tensor& x = in[stream_];
    Tensor h = norm_(x);
    // Note [Fused residual]. stream + dropout(f) is done in f's last
    // product's epilogue (ops::linear with a residual and a dropout, Note
    // [Fused linear] in ops/linalg.cc): no pass over memory for the dropout
    // or the add; the same bits and the same mask as drop_ then ops::add.
    // Incremental decoding keeps the separate add (eval: no dropout).
    const Tensor& residual = x;
    const ops::FusedDropout dropout = drop_.fused();
    Tensor f;
    bool added = false;  // f already holds x + f
    switch (kind_) {
      case SublayerKind::kSelfAttention:
        f = attn_->attend(h, h, in[1], residual, dropout);
        added = true;
        break;  // keys: the padded source
      case SublayerKind::kCausalSelfAttention:
        f = cache ? attn_->attend_incremental(h, *cache)
                  : attn_->attend(h, h, Tensor(), residual, dropout);
        added = !cache;
        break;
      case SublayerKind::kCrossAttention:
        f = cache ? attn_->attend_cached_memory(h, in[0], in[1], *cache)
                  : attn_->attend(h, in[0], in[1], residual, dropout);
        added = !cache;
        break;
      case SublayerKind::kFeedForward:
        f = ffn_->forward_residual(h, residual, dropout);
        added = true;
        break;
    }
    out[stream_] = added ? f : ops::add(x, drop_(f));
    if (cache && stream_ == 0) cache->position = 1;  // ran once: pass through from now on
    return out;
  }
  BundleSpec output_spec(const BundleSpec& in) const override {
    expect_inputs(in, 3);
    expect_hidden(name(), in[stream_], c_.dim);
    if (kind_ == SublayerKind::kCrossAttention) expect_hidden(name(), in[0], c_.dim);
    return in;
  }
  double cost(const BundleSpec& in) const override {
    const auto& s = in[stream_].shape;
    if (kind_ == SublayerKind::kFeedForward) return ffn_->cost({in[stream_]});
    const int64_t keys = kind_ == SublayerKind::kCrossAttention ? in[0].shape[1] : s[1];
    return attn_->flops(s[0], s[1], keys);
  }

 private:
  TransformerConfig c_;
  SublayerKind kind_;
  size_t stream_;
  LayerNorm norm_;
  std::unique_ptr<MultiHeadAttention> attn_;
  std::unique_ptr<FeedForward> ffn_;
  Dropout drop_;
};

class TargetEmbedding final : public Layer {
 public:
  TargetEmbedding(const TransformerConfig& c, Tensor table)
      : Layer("tgt_embed"),
        table(std::move(table)),
        c_(c),
        pe_(sinusoid_table(c.max_len, c.dim)),
        ln_enc_("encoder_norm", c.dim),
        drop_("dropout", c.dropout, 1),
        embed_(c, &this->table) {
    register_parameter("shared_embedding", &this->table);
    register_sublayer("encoder_norm", &ln_enc_);
    register_sublayer("dropout", &drop_);
  }
  Bundle forward(const Bundle& in) override {
    expect_inputs(spec_of(in), 3);
    LayerDecodeCache* cache = current_decode_cache();
    if (!cache) return {ln_enc_(in[0]), in[1], embed_.embed(in[2], pe_, drop_)};
    // Incremental decoding: the memory is normalised once; the target tokens
    // are the newest positions, placed after those already decoded.
    if (!cache->has("memory")) cache->tensors["memory"] = ln_enc_(in[0]);
    Tensor x = embed_.embed(in[2], pe_, drop_, cache->position);
    cache->position += in[2].size(1);
    return {cache->tensors["memory"], in[1], x};
  }
  BundleSpec output_spec(const BundleSpec& in) const override {
    expect_inputs(in, 3);
    expect_hidden(name(), in[0], c_.dim);
    expect_tokens(name(), in[2]);
    return {in[0], in[1], {Shape{in[2].shape[0], in[2].shape[1], c_.dim}, table.dtype()}};
  }
  double cost(const BundleSpec& in) const override { return 8.0 * in[0].shape.numel(); }
  Tensor table;

 private:
  TransformerConfig c_;
  Tensor pe_;
  LayerNorm ln_enc_;
  Dropout drop_;
  Embedder embed_;
};

class OutputProjection final : public Layer {
 public:
  OutputProjection(const TransformerConfig& c, Tensor table)
      : Layer("output"), table(std::move(table)), c_(c), ln_dec_("decoder_norm", c.dim) {
    register_parameter("shared_embedding", &this->table);
    register_sublayer("decoder_norm", &ln_dec_);
  }
  bool takes_16bit() const override { return true; }
  // The decoder's normalised states and the tied table: the loss fuses the
  // product (Note [Fused output loss] in ops/loss.cc).
  std::optional<LinearHead> forward_head(const Bundle& in) override {
    expect_inputs(spec_of(in), 3);
    return LinearHead{ln_dec_(in[2]), table, current_precision()};
  }
  Bundle forward(const Bundle& in) override { return forward_head(in)->logits(); }
  BundleSpec output_spec(const BundleSpec& in) const override {
    expect_inputs(in, 3);
    expect_hidden(name(), in[2], c_.dim);
    return {{Shape{in[2].shape[0], in[2].shape[1], c_.vocab}, table.dtype()}};
  }
  double cost(const BundleSpec& in) const override {
    return 2.0 * in[2].shape[0] * in[2].shape[1] * c_.dim * c_.vocab;
  }
  Tensor table;

 private:
  TransformerConfig c_;
  LayerNorm ln_dec_;
};

}  // namespace

TransformerConfig transformer_preset(const std::string& name) {
  static const std::map<std::string, std::array<int64_t, 3>> presets = {
      {"T(6,8192,16)", {6, 8192, 16}},
      {"T(24,8192,16)", {24, 8192, 16}},
      {"T(12,16384,32)", {12, 16384, 32}},
      {"T(32,16384,32)", {32, 16384, 32}},
      {"T(64,16384,32)", {64, 16384, 32}}};
  auto it = presets.find(name);
  if (it == presets.end()) {
    std::string known;
    for (auto& [k, v] : presets) known += (known.empty() ? "" : ", ") + k;
    throw Error(detail::concat("unknown Transformer preset '", name, "' (known: ", known, ")"));
  }
  TransformerConfig c;
  c.layers = it->second[0];
  c.ffn = it->second[1];
  c.heads = it->second[2];
  return c;
}

int64_t transformer_parameter_count(const TransformerConfig& c) {
  // In 128 bits, saturated: a size no machine holds (--dim=1e9) still gives a
  // count to refuse (tools/train/preflight.cc), not a wrapped one.
  using Wide = __int128;
  const Wide d = c.dim, h = c.ffn;
  const Wide attn = 4 * (d * d + d), ffn = d * h + h + h * d + d, ln = 2 * d;
  const Wide enc = attn + ffn + 2 * ln, dec = 2 * attn + ffn + 3 * ln;
  const Wide n = Wide(c.vocab) * d + Wide(c.layers) * (enc + dec) + 2 * ln;
  return n > Wide(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(n);
}

int64_t transformer_layer_count(const TransformerConfig& c) { return 5 * c.layers + 3; }

Model transformer(const TransformerConfig& c) {
  GPIPE_CHECK(c.layers >= 1 && c.ffn >= 1 && c.heads >= 1 && c.dim >= 2 && c.vocab >= 2,
              "transformer: layers, ffn, heads, dim and vocab must be positive");
  GPIPE_CHECK(c.dim % c.heads == 0, "transformer: dim ", c.dim, " is not divisible by heads ",
              c.heads);
  GPIPE_CHECK(c.pad_id >= 0 && c.pad_id < c.vocab, "transformer: pad_id ", c.pad_id,
              " outside the vocabulary [0, ", c.vocab, ")");
  const Tensor table = make_parameter(Tensor::randn(Shape{c.vocab, c.dim}, mix_key(c.seed, 1),
                                                    1.0 / std::sqrt(static_cast<double>(c.dim))));
  const double scale = c.scaled_init ? 1.0 / std::sqrt(2.0 * c.layers) : 1.0;
  Model m;
  m.layers.push_back(std::make_shared<SourceEmbedding>(c, table));
  auto sublayer = [&](const std::string& name, SublayerKind kind, size_t stream, uint64_t salt) {
    m.layers.push_back(
        std::make_shared<ResidualSublayer>(c, name, kind, stream, mix_key(c.seed, salt), scale));
  };
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string n = "encoder_" + std::to_string(i);
    sublayer(n + ".self_attn", SublayerKind::kSelfAttention, 0, 100 + i);
    sublayer(n + ".ffn", SublayerKind::kFeedForward, 0, 200 + i);
  }
  m.layers.push_back(std::make_shared<TargetEmbedding>(c, table));
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string n = "decoder_" + std::to_string(i);
    sublayer(n + ".self_attn", SublayerKind::kCausalSelfAttention, 2, 300 + i);
    sublayer(n + ".cross_attn", SublayerKind::kCrossAttention, 2, 400 + i);
    sublayer(n + ".ffn", SublayerKind::kFeedForward, 2, 500 + i);
  }
  m.layers.push_back(std::make_shared<OutputProjection>(c, table));
  m.loss = std::make_shared<CrossEntropyLoss>(
      CrossEntropyLossOptions{.ignore_index = c.pad_id,
                              .label_smoothing = c.label_smoothing,
                              .logit_clip = c.logit_clip,
                              .fuse_projection = c.fused_loss});
  return m;
}

}  // namespace gpipe::models
