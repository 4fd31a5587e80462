// GPT-2 and Llama as one layer list: an embedding layer, L pairs of residual
// sublayers (attention, MLP) that differ only in options, and a head whose
// product the loss fuses. The token table of a tied model is one tensor in
// the embedding and the head (a tie across cells when they differ, Note
// [Tied copies] in pipeline/placement.cc).
#include "models/lm.h"

#include <cmath>
#include <map>

#include "core/rng.h"
#include "layers/attention.h"
#include "layers/loss.h"
#include "ops/ops.h"

namespace gpipe::models {
namespace {

bool is_gpt2(const LmConfig& c) { return c.arch == "gpt2"; }

void expect_hidden(const std::string& who, const TensorSpec& s, int64_t dim) {
  GPIPE_CHECK(s.shape.rank() == 3 && s.shape[2] == dim && is_floating(s.dtype), "layer '", who,
              "': expected hidden states [B, T, ", dim, "], got ", s.dtype, s.shape);
}

// Note [Document mask]. Packed rows hold several documents separated by
// the end-of-text id; with a document mask a query attends only to keys of
// its own document (and causally). A document here begins at an
// end-of-text token: that token's target is the document's first token, so
// predicting it must not see the document before. pack() writes the id
// after each document and llm.c's scripts before each, and both read the
// same way. A packed row then gives each of its documents exactly the
// losses it would have alone (begun by an end-of-text token but for the
// row's first). GPT-2's learned positions restart at 0 with each document
// for the same reason; Llama's rotary positions need no restart (the scores
// depend on the distance between query and key only; equal to round-off).
// The ids are computed once, in the embedding, and ride the bundle as a
// second tensor to every attention sublayer.
struct DocumentIds {
  Tensor segments, positions;  // [B, T] int64 each
};
DocumentIds document_ids(const Tensor& tokens, int64_t eot, Device device) {
  const int64_t b = tokens.size(0), t = tokens.size(1);
  const std::vector<int64_t> ids = tokens.to_vector<int64_t>();
  std::vector<int64_t> seg(ids.size()), pos(ids.size());
  for (int64_t r = 0; r < b; ++r) {
    int64_t s = 0, start = 0;
    for (int64_t i = 0; i < t; ++i) {
      const size_t at = static_cast<size_t>(r * t + i);
      if (i > 0 && ids[at] == eot) {
        ++s;
        start = i;
      }
      seg[at] = s;
      pos[at] = i - start;
    }
  }
  return {Tensor::from_vector(seg, Shape{b, t}).to(device),
          Tensor::from_vector(pos, Shape{b, t}).to(device)};
}

// A sublayer's bundle: the hidden states, and the document ids when masked.
// forward checks the count only (16-bit states arrive under bf16 / fp16);
// output_spec also the states' shape.
void expect_stream(const Layer& layer, const BundleSpec& in, const LmConfig& c,
                   bool states = true) {
  // One input in incremental decoding, which keeps no document ids.
  GPIPE_CHECK(in.size() == 1 || (in.size() == 2 && c.document_eot >= 0), "layer '", layer.name(),
              "': expected ", c.document_eot >= 0 ? "2" : "1", " inputs (the hidden states",
              c.document_eot >= 0 ? " and the document ids" : "", "), got ", in.size());
  if (states) expect_hidden(layer.name(), in[0], c.dim);
}

Tensor normal_parameter(const Shape& shape, uint64_t key, double std) {
  return make_parameter(Tensor::randn(shape, key, std));
}

// Tokens [B, T] -> hidden states [B, T, d]: the token table (plus GPT-2's
// learned positions), then dropout.
class LmEmbedding final : public Layer {
 public:
  LmEmbedding(const LmConfig& c, Tensor table)
      : Layer("embed"), table(std::move(table)), c_(c), drop_("dropout", c.dropout, 1) {
    register_parameter("wte", &this->table);
    if (is_gpt2(c)) {
      positions = normal_parameter(Shape{c.context, c.dim}, mix_key(c.seed, 2), 0.01);
      register_parameter("wpe", &positions);
    }
    register_sublayer("dropout", &drop_);
  }
  Bundle forward(const Bundle& in) override {
    const BundleSpec spec = spec_of(in);
    check(spec);
    const Tensor& tokens = in[0];
    // Incremental decoding: the tokens are the newest positions.
    LayerDecodeCache* cache = current_decode_cache();
    const int64_t offset = cache ? cache->position : 0, t = tokens.size(1);
    GPIPE_CHECK(offset + t <= c_.context, "layer 'embed': position ", offset + t,
                " is past the context of ", c_.context, " tokens");
    if (cache) cache->position += t;
    Tensor x = ops::embedding(table, tokens);
    if (c_.document_eot >= 0 && !cache) {
      const DocumentIds d = document_ids(tokens, c_.document_eot, table.device());
      if (positions.defined()) x = ops::add(x, ops::embedding(positions, d.positions));
      return {drop_(x), d.segments};
    }
    if (positions.defined()) x = ops::add(x, ops::narrow(positions, 0, offset, t));
    return {drop_(x)};
  }
  BundleSpec output_spec(const BundleSpec& in) const override {
    check(in);
    const Shape bt{in[0].shape[0], in[0].shape[1]};
    if (c_.document_eot >= 0)
      return {{Shape{bt[0], bt[1], c_.dim}, table.dtype()}, {bt, DType::kInt64}};
    return {{Shape{bt[0], bt[1], c_.dim}, table.dtype()}};
  }
  double cost(const BundleSpec&) const override { return 0.0; }
  Tensor table, positions;

 private:
  void check(const BundleSpec& in) const {
    expect_inputs(in, 1);
    GPIPE_CHECK(in[0].shape.rank() == 2 && is_integral(in[0].dtype), "layer 'embed': expected ",
                "int tokens [B, T], got ", in[0].dtype, in[0].shape);
    GPIPE_CHECK(in[0].shape[1] <= c_.context, "layer 'embed': ", in[0].shape[1],
                " tokens are more than the context of ", c_.context);
  }
  LmConfig c_;
  Dropout drop_;
};

std::unique_ptr<UnaryLayer> make_norm(const LmConfig& c, const std::string& name) {
  if (is_gpt2(c)) return std::make_unique<LayerNorm>(name, c.dim, c.norm_eps);
  return std::make_unique<RMSNorm>(name, c.dim, c.norm_eps);
}

// One residual sublayer, x += dropout(f(norm(x))): f the causal attention or the MLP.
class LmSublayer final : public Layer {
 public:
  LmSublayer(const LmConfig& c, std::string name, bool attention, uint64_t seed)
      : Layer(std::move(name)), c_(c), norm_(make_norm(c, "norm")), drop_("dropout", c.dropout, 1) {
    register_sublayer("norm", norm_.get());
    const bool bias = is_gpt2(c);
    LinearOptions lin;
    lin.bias = bias;
    if (attention) {
      attn_ = std::make_unique<MultiHeadAttention>("attn",
                                                   AttentionOptions{.dim = c.dim,
                                                                    .heads = c.heads,
                                                                    .causal = true,
                                                                    .dropout = c.dropout,
                                                                    .kv_heads = c.kv(),
                                                                    .bias = bias,
                                                                    .rotary = c.rotary},
                                                   seed);
      register_sublayer("attn", attn_.get());
    } else {
      if (!is_gpt2(c)) {
        gate_ = std::make_unique<Linear>("gate", c.dim, c.ffn, mix_key(seed, 31), lin);
        register_sublayer("gate", gate_.get());
      }
      up_ = std::make_unique<Linear>("up", c.dim, c.ffn, mix_key(seed, 32), lin);
      down_ = std::make_unique<Linear>("down", c.ffn, c.dim, mix_key(seed, 33), lin);
      register_sublayer("up", up_.get());
      register_sublayer("down", down_.get());
    }
    register_sublayer("dropout", &drop_);
  }
  bool takes_16bit() const override { return true; }
  Bundle forward(const Bundle& in) override {
    expect_stream(*this, spec_of(in), c_, false);
    const Tensor& x = in[0];
    const Tensor h = norm_->forward(x);
    const ops::FusedDropout dropout = drop_.fused();
    Bundle out = in;
    if (attn_) {
      if (LayerDecodeCache* cache = current_decode_cache())
        return {ops::add(x, attn_->attend_incremental(h, *cache))};
      out[0] = attn_->attend(h, h, Tensor(), x, dropout, in.size() > 1 ? in[1] : Tensor());
      return out;
    }
    // The activation in the product's bias + activation pass (ops::linear):
    // SwiGLU as silu(gate) * up, GPT-2's GELU on up.
    const Tensor act = gate_ ? ops::mul(gate_->forward(h, Activation::kSilu), (*up_)(h))
                             : up_->forward(h, Activation::kGeluTanh);
    out[0] = down_->forward_residual(act, x, dropout);
    return out;
  }
  BundleSpec output_spec(const BundleSpec& in) const override {
    expect_stream(*this, in, c_);
    return in;
  }
  double cost(const BundleSpec& in) const override {
    const auto& s = in[0].shape;
    if (attn_) return attn_->flops(s[0], s[1], s[1]);
    const double rows = static_cast<double>(s[0] * s[1]);
    return 2.0 * rows * c_.dim * c_.ffn * (gate_ ? 3 : 2);
  }

 private:
  LmConfig c_;
  std::unique_ptr<UnaryLayer> norm_;
  std::unique_ptr<MultiHeadAttention> attn_;
  std::unique_ptr<Linear> gate_, up_, down_;
  Dropout drop_;
};

// The final norm and the output projection (the token table when tied).
class LmHead final : public Layer {
 public:
  LmHead(const LmConfig& c, Tensor weight)
      : Layer("head"), weight(std::move(weight)), c_(c), norm_(make_norm(c, "norm")) {
    register_sublayer("norm", norm_.get());
    register_parameter(c.tied ? "wte" : "weight", &this->weight);
  }
  bool takes_16bit() const override { return true; }
  std::optional<LinearHead> forward_head(const Bundle& in) override {
    expect_stream(*this, spec_of(in), c_, false);
    return LinearHead{norm_->forward(in[0]), weight, current_precision()};
  }
  Bundle forward(const Bundle& in) override { return forward_head(in)->logits(); }
  BundleSpec output_spec(const BundleSpec& in) const override {
    expect_stream(*this, in, c_);
    return {{Shape{in[0].shape[0], in[0].shape[1], c_.vocab}, weight.dtype()}};
  }
  double cost(const BundleSpec& in) const override {
    return 2.0 * in[0].shape[0] * in[0].shape[1] * c_.dim * c_.vocab;
  }
  Tensor weight;

 private:
  LmConfig c_;
  std::unique_ptr<UnaryLayer> norm_;
};

LmConfig gpt2_size(int64_t layers, int64_t dim, int64_t heads) {
  LmConfig c;
  c.arch = "gpt2";
  c.layers = layers;
  c.dim = dim;
  c.heads = heads;
  c.ffn = 4 * dim;
  c.vocab = 50257;
  c.context = 1024;
  c.tied = true;
  return c;
}

LmConfig llama_size(int64_t layers, int64_t dim, int64_t heads, int64_t ffn, bool tied,
                    double factor) {
  LmConfig c;
  c.arch = "llama";
  c.layers = layers;
  c.dim = dim;
  c.heads = heads;
  c.kv_heads = 8;
  c.ffn = ffn;
  c.vocab = 128256;
  c.context = 131072;
  c.tied = tied;
  c.rotary = {
      .enabled = true,
      .theta = 500000,
      .scaling = {
          .factor = factor, .low_freq_factor = 1, .high_freq_factor = 4, .original_context = 8192}};
  return c;
}

const std::map<std::string, LmConfig>& presets() {
  static const std::map<std::string, LmConfig> p = {
      {"gpt2", gpt2_size(12, 768, 12)},
      {"gpt2-medium", gpt2_size(24, 1024, 16)},
      {"gpt2-large", gpt2_size(36, 1280, 20)},
      {"gpt2-xl", gpt2_size(48, 1600, 25)},
      {"llama-3.2-1b", llama_size(16, 2048, 32, 8192, true, 32)},
      {"llama-3.2-3b", llama_size(28, 3072, 24, 8192, true, 32)},
      {"llama-3.1-8b", llama_size(32, 4096, 32, 14336, false, 8)},
      {"llama-3.1-70b", llama_size(80, 8192, 64, 28672, false, 8)},
  };
  return p;
}

}  // namespace

std::vector<std::string> lm_preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, c] : presets()) names.push_back(name);
  return names;
}

LmConfig lm_preset(const std::string& name) {
  const auto it = presets().find(name);
  if (it != presets().end()) return it->second;
  std::string known;
  for (const std::string& n : lm_preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error(detail::concat("unknown language-model preset '", name, "' (known: ", known, ")"));
}

LmConfig lm_default(const std::string& arch) {
  LmConfig c;
  c.arch = arch;
  c.layers = 4;
  c.dim = 128;
  c.heads = 4;
  c.ffn = arch == "llama" ? 384 : 512;
  c.kv_heads = arch == "llama" ? 2 : 0;
  c.context = 128;
  c.tied = arch != "llama";
  if (arch == "llama") c.rotary = {.enabled = true, .theta = 10000};
  return c;
}

int64_t lm_parameter_count(const LmConfig& c) {
  using Wide = __int128;  // saturated, as transformer_parameter_count
  const Wide d = c.dim, f = c.ffn, kvd = c.heads > 0 ? Wide(c.dim) / c.heads * c.kv() : d;
  const bool bias = is_gpt2(c);
  const Wide norm = bias ? 2 * d : d;  // LayerNorm: gamma and beta; RMSNorm: weight
  const Wide attn = 2 * d * d + 2 * d * kvd + (bias ? 2 * d + 2 * kvd : 0);
  const Wide mlp = bias ? 2 * d * f + f + d : 3 * d * f;
  Wide n = Wide(c.vocab) * d + Wide(c.layers) * (2 * norm + attn + mlp) + norm;
  if (bias) n += Wide(c.context) * d;
  if (!c.tied) n += Wide(c.vocab) * d;
  return n > Wide(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(n);
}

int64_t lm_layer_count(const LmConfig& c) { return 2 * c.layers + 2; }

void check_lm_config(const LmConfig& c) {
  GPIPE_CHECK(c.arch == "gpt2" || c.arch == "llama", "language model: arch '", c.arch,
              "' is not gpt2 or llama");
  GPIPE_CHECK(
      c.layers >= 1 && c.dim >= 2 && c.heads >= 1 && c.ffn >= 1 && c.vocab >= 2 && c.context >= 2,
      "language model: layers, dim, heads, ffn, vocab and context must be positive (got ", c.layers,
      ", ", c.dim, ", ", c.heads, ", ", c.ffn, ", ", c.vocab, ", ", c.context, ")");
  GPIPE_CHECK(c.dim % c.heads == 0, "language model: dim ", c.dim, " is not divisible by heads ",
              c.heads);
  GPIPE_CHECK(c.kv_heads >= 0 && c.heads % c.kv() == 0, "language model: heads ", c.heads,
              " is not a multiple of kv-heads ", c.kv());
  GPIPE_CHECK(!c.rotary.enabled || (c.dim / c.heads) % 2 == 0, "language model: head dim ",
              c.dim / c.heads, " must be even for the rotary embedding");
}

Model language_model(const LmConfig& c) {
  check_lm_config(c);
  const Tensor table = normal_parameter(Shape{c.vocab, c.dim}, mix_key(c.seed, 1), 0.02);
  Model m;
  m.layers.push_back(std::make_shared<LmEmbedding>(c, table));
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string n = "h." + std::to_string(i);
    m.layers.push_back(
        std::make_shared<LmSublayer>(c, n + ".attn", true, mix_key(c.seed, 100 + i)));
    m.layers.push_back(
        std::make_shared<LmSublayer>(c, n + ".mlp", false, mix_key(c.seed, 200 + i)));
  }
  const Tensor head =
      c.tied ? table : normal_parameter(Shape{c.vocab, c.dim}, mix_key(c.seed, 3), 0.02);
  m.layers.push_back(std::make_shared<LmHead>(c, head));
  m.loss = std::make_shared<CrossEntropyLoss>(
      CrossEntropyLossOptions{.ignore_index = c.ignore_index, .fuse_projection = true});
  return m;
}

}  // namespace gpipe::models
