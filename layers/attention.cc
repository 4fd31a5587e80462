// Attention: Q, K, V projections, then ops::attention (all heads in one
// fused op: scores = Q K^T / sqrt(dh), masked (causal and key padding) with a
// large negative value rather than -inf so a fully padded row stays finite,
// softmax over keys, dropout on the probabilities in training, then P V),
// then the output projection.
#include "layers/attention.h"

#include <cmath>

#include "core/rng.h"
#include "ops/ops.h"

namespace gpipe {
namespace {

LinearOptions proj(double scale, bool bias = true) {
  LinearOptions o;
  o.init_scale = scale;
  o.bias = bias;
  return o;
}

// K and V's width: kv_heads heads of dim / heads.
int64_t kv_dim(const AttentionOptions& o) {
  const int64_t kv = o.kv_heads > 0 ? o.kv_heads : o.heads;
  return o.heads > 0 ? o.dim / o.heads * kv : o.dim;
}
}  // namespace

MultiHeadAttention::MultiHeadAttention(std::string name, AttentionOptions opt, uint64_t seed)
    : Layer(std::move(name)),
      opt_(opt),
      q_("q", opt.dim, opt.dim, mix_key(seed, 11), proj(opt.init_scale, opt.bias)),
      k_("k", opt.dim, kv_dim(opt), mix_key(seed, 12), proj(opt.init_scale, opt.bias)),
      v_("v", opt.dim, kv_dim(opt), mix_key(seed, 13), proj(opt.init_scale, opt.bias)),
      o_("o", opt.dim, opt.dim, mix_key(seed, 14), proj(opt.init_scale, opt.bias)),
      drop_("attn_dropout", opt.dropout, mix_key(seed, 15)) {
  GPIPE_CHECK(opt.heads > 0 && opt.dim % opt.heads == 0, "MultiHeadAttention '", this->name(),
              "': dim ", opt.dim, " is not divisible by heads ", opt.heads);
  GPIPE_CHECK(opt.kv_heads >= 0 && opt.heads % kv_heads() == 0, "MultiHeadAttention '",
              this->name(), "': heads ", opt.heads, " is not a multiple of kv_heads ", kv_heads());
  register_sublayer("q", &q_);
  register_sublayer("k", &k_);
  register_sublayer("v", &v_);
  register_sublayer("o", &o_);
  register_sublayer("attn_dropout", &drop_);
}

Tensor MultiHeadAttention::attend(const Tensor& query, const Tensor& memory,
                                  const Tensor& key_padding, const Tensor& residual,
                                  const ops::FusedDropout& dropout, const Tensor& segments) {
  GPIPE_CHECK(query.rank() == 3 && query.size(2) == opt_.dim, "MultiHeadAttention '", name(),
              "': expected query [B, T, ", opt_.dim, "], got ", query.shape());
  GPIPE_CHECK(memory.rank() == 3 && memory.size(2) == opt_.dim && memory.size(0) == query.size(0),
              "MultiHeadAttention '", name(), "': expected memory [", query.size(0), ", T, ",
              opt_.dim, "], got ", memory.shape());
  const int64_t b = query.size(0), tk = memory.size(1);
  if (key_padding.defined())
    GPIPE_CHECK(key_padding.rank() == 2 && key_padding.size(0) == b && key_padding.size(1) == tk,
                "MultiHeadAttention '", name(), "': expected key padding mask [", b, ", ", tk,
                "], got ", key_padding.shape());
  const Tensor q = rotate(q_(query), opt_.heads, 0);
  const Tensor k = repeat_kv(rotate(k_(memory), kv_heads(), 0)), v = repeat_kv(v_(memory));
  // One fused op, with the dropout on the probabilities inside it (Note
  // [Attention dropout] in ops/attention.cc: drop_'s mask, as if drop_ ran
  // on the probabilities of the composed form).
  GPIPE_CHECK(!segments.defined() || (opt_.causal && !key_padding.defined()),
              "MultiHeadAttention '", name(),
              "': segments apply to causal self-attention without key padding");
  const Tensor ctx =
      segments.defined()
          ? ops::document_attention(q, k, v, opt_.heads, segments, drop_.fused())
          : ops::attention(q, k, v, opt_.heads, opt_.causal, key_padding, drop_.fused());
  GPIPE_CHECK(residual.defined() || dropout.p == 0, "MultiHeadAttention '", name(),
              "': a dropout on the output needs the residual it is added to");
  return residual.defined() ? o_.forward_residual(ctx, residual, dropout) : o_(ctx);
}

Tensor MultiHeadAttention::attend_incremental(const Tensor& query, LayerDecodeCache& cache) {
  GPIPE_CHECK(!training(), "MultiHeadAttention '", name(),
              "': incremental decoding runs in eval mode");
  GPIPE_CHECK(query.rank() == 3 && query.size(2) == opt_.dim, "MultiHeadAttention '", name(),
              "': expected query [B, T, ", opt_.dim, "], got ", query.shape());
  const int64_t offset = cache.has("k") ? cache.tensors["k"].size(1) : 0;
  Tensor k = rotate(k_(query), kv_heads(), offset), v = v_(query);
  if (cache.has("k")) {
    GPIPE_CHECK(cache.tensors["k"].size(0) == query.size(0), "MultiHeadAttention '", name(),
                "': the session has ", cache.tensors["k"].size(0), " rows but this step has ",
                query.size(0));
    k = ops::concat({cache.tensors["k"], k}, 1);
    v = ops::concat({cache.tensors["v"], v}, 1);
  }
  cache.tensors["k"] = k;
  cache.tensors["v"] = v;
  // One new position attends to every cached one (all at or before it).
  // Several new positions (a prefix fed at once) need the causal mask,
  // which aligns the last query with the last key only when nothing was cached before.
  const bool causal = opt_.causal && query.size(1) > 1;
  GPIPE_CHECK(!causal || k.size(1) == query.size(1), "MultiHeadAttention '", name(),
              "': after the first step, feed one new position per step (got ", query.size(1), ")");
  return o_(ops::attention(rotate(q_(query), opt_.heads, offset), repeat_kv(k), repeat_kv(v),
                           opt_.heads, causal));
}

Tensor MultiHeadAttention::rotate(const Tensor& x, int64_t heads, int64_t offset) const {
  return opt_.rotary.enabled ? ops::rotary_embedding(x, heads, opt_.rotary, offset) : x;
}

// [B, T, kv_heads * dh] -> [B, T, heads * dh], kv head i serving Q heads
// i * g .. i * g + g - 1 (g = heads / kv_heads), as Hugging Face's repeat_kv.
Tensor MultiHeadAttention::repeat_kv(const Tensor& x) const {
  const int64_t kv = kv_heads();
  if (kv == opt_.heads) return x;
  const int64_t b = x.size(0), t = x.size(1), dh = opt_.dim / opt_.heads, g = opt_.heads / kv;
  const Tensor grouped = ops::expand(ops::reshape(x, {b, t, kv, 1, dh}), Shape{b, t, kv, g, dh});
  return ops::reshape(grouped, {b, t, opt_.heads * dh});
}

Tensor MultiHeadAttention::attend_cached_memory(const Tensor& query, const Tensor& memory,
                                                const Tensor& key_padding,
                                                LayerDecodeCache& cache) {
  GPIPE_CHECK(!training(), "MultiHeadAttention '", name(),
              "': incremental decoding runs in eval mode");
  if (!cache.has("memory_k")) {
    cache.tensors["memory_k"] = repeat_kv(k_(memory));
    cache.tensors["memory_v"] = repeat_kv(v_(memory));
  }
  return o_(ops::attention(q_(query), cache.tensors["memory_k"], cache.tensors["memory_v"],
                           opt_.heads, false, key_padding));
}

Bundle MultiHeadAttention::forward(const Bundle& in) {
  GPIPE_CHECK(!in.empty() && in.size() <= 3, "MultiHeadAttention '", name(),
              "': expected (query[, memory[, key_padding]]), got ", in.size(), " tensors");
  return {attend(in[0], in.size() > 1 ? in[1] : in[0], in.size() > 2 ? in[2] : Tensor())};
}

BundleSpec MultiHeadAttention::output_spec(const BundleSpec& in) const {
  GPIPE_CHECK(!in.empty() && in[0].shape.rank() == 3 && in[0].shape[2] == opt_.dim,
              "MultiHeadAttention '", name(), "': expected query [B, T, ", opt_.dim, "], got ",
              in.empty() ? Shape{} : in[0].shape);
  return {in[0]};
}

double MultiHeadAttention::flops(int64_t batch, int64_t tq, int64_t tk) const {
  const double d = static_cast<double>(opt_.dim), kv = static_cast<double>(kv_dim(opt_));
  return 2.0 * batch * (2 * tq * d + 2 * tk * kv) * d + 4.0 * batch * tq * tk * d;
}

double MultiHeadAttention::cost(const BundleSpec& in) const {
  if (in.empty()) return 0;
  const auto& q = in[0].shape;
  const int64_t tk = in.size() > 1 ? in[1].shape[1] : q[1];
  return flops(q[0], q[1], tk);
}

FeedForward::FeedForward(std::string name, int64_t dim, int64_t hidden, Activation act,
                         uint64_t seed, double dropout, double init_scale)
    : UnaryLayer(std::move(name)),
      dim_(dim),
      hidden_(hidden),
      act_(act),
      in_("in", dim, hidden, mix_key(seed, 21), proj(init_scale)),
      out_("out", hidden, dim, mix_key(seed, 22), proj(init_scale)),
      drop_("ffn_dropout", dropout, mix_key(seed, 23)) {
  register_sublayer("in", &in_);
  register_sublayer("out", &out_);
  register_sublayer("ffn_dropout", &drop_);
}

// in_'s bias and the activation run as one fused pass (ops::bias_activation).
Tensor FeedForward::forward(const Tensor& x) { return out_(in_.forward(x, act_, drop_.fused())); }
Tensor FeedForward::forward_residual(const Tensor& x, const Tensor& residual,
                                     const ops::FusedDropout& dropout) {
  return out_.forward_residual(in_.forward(x, act_, drop_.fused()), residual, dropout);
}

TensorSpec FeedForward::output_spec(const TensorSpec& in) const {
  expect_last_axis(name(), in, dim_);
  return in;
}

double FeedForward::cost(const BundleSpec& in) const {
  if (in.empty()) return 0;
  const double rows = static_cast<double>(in[0].shape.numel()) / dim_;
  return 4.0 * rows * dim_ * hidden_;
}

Residual::Residual(std::string name, std::shared_ptr<UnaryLayer> inner, int64_t norm_dim,
                   double dropout, uint64_t salt)
    : UnaryLayer(std::move(name)),
      inner_(std::move(inner)),
      drop_("residual_dropout", dropout, salt) {
  register_sublayer(inner_->name(), inner_.get());
  if (norm_dim > 0) {
    norm_ = std::make_unique<LayerNorm>("norm", norm_dim);
    register_sublayer("norm", norm_.get());
  }
  register_sublayer("residual_dropout", &drop_);
}

Tensor Residual::forward(const Tensor& x) {
  const Tensor h = norm_ ? norm_->forward(x) : x;
  // A branch that ends in a product takes the dropout and the add into its
  // epilogue (Note [Fused residual] in models/transformer.cc): same bits, same mask.
  if (auto* ffn = dynamic_cast<FeedForward*>(inner_.get()))
    return ffn->forward_residual(h, x, drop_.fused());
  if (auto* lin = dynamic_cast<Linear*>(inner_.get()); lin && lin->weight.size(0) == x.size(-1))
    return lin->forward_residual(h, x, drop_.fused());
  return ops::add(x, drop_(inner_->forward(h)));
}

TensorSpec Residual::output_spec(const TensorSpec& in) const { return inner_->output_spec(in); }

double Residual::cost(const BundleSpec& in) const { return inner_->cost(in); }

}  // namespace gpipe
