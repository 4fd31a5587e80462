#include "models/transformer.h"

#include <catch2/catch.hpp>
#include <unordered_set>

#include "ops/ops.h"

using namespace gpipe;
using Catch::Contains;

namespace {
models::TransformerConfig tiny() {
  models::TransformerConfig c;
  c.layers = 2;
  c.ffn = 32;
  c.heads = 2;
  c.dim = 16;
  c.vocab = 20;
  c.max_len = 16;
  c.seed = 3;
  return c;
}

int64_t unique_params(const Model& m) {
  std::unordered_set<TensorImpl*> seen;
  int64_t n = 0;
  for (const auto& l : m.layers)
    for (auto& p : l->parameters())
      if (seen.insert(p.tensor->impl_ptr().get()).second) n += p.tensor->numel();
  return n;
}
}  // namespace

TEST_CASE("transformer: parameter count formula matches the built model and W2") {
  models::TransformerConfig w2;
  w2.layers = 3;
  w2.ffn = 1024;
  w2.heads = 4;
  w2.dim = 256;
  w2.vocab = 8192;
  // Independently: BENCHMARKS.md W2 says 7,627,776 for this model.
  CHECK(models::transformer_parameter_count(w2) == 7627776);
  Model m = models::transformer(tiny());
  CHECK(unique_params(m) == models::transformer_parameter_count(tiny()));
  CHECK(m.layers.size() == 5 * 2 + 3);  // each residual sublayer is a layer the pipeline can cut at
  CHECK(static_cast<int64_t>(m.layers.size()) == models::transformer_layer_count(tiny()));
  CHECK(m.layers[1]->name() == "encoder_0.self_attn");
  CHECK(m.layers[6]->name() == "decoder_0.self_attn");
  CHECK(m.layers[7]->name() == "decoder_0.cross_attn");
  CHECK(m.layers[8]->name() == "decoder_0.ffn");
  // The embedding is one tensor shared by three layers.
  CHECK(m.layers.front()->parameters()[0].tensor->impl_ptr() ==
        m.layers.back()->parameters()[0].tensor->impl_ptr());
}

TEST_CASE("transformer: named parameters without a Pipeline, ties counted once") {
  Model m = models::transformer(tiny());
  const std::vector<NamedTensor> params = named_parameters(m.layers);
  int64_t n = 0;
  std::unordered_set<std::string> names;
  for (const NamedTensor& p : params) {
    n += p.tensor->numel();
    CHECK(names.insert(p.name).second);
  }
  CHECK(n == models::transformer_parameter_count(tiny()));
  CHECK(params.front().name == "src_embed.shared_embedding");
  CHECK(names.count("encoder_1.ffn.mlp.in.weight") == 1);
  CHECK(names.count("decoder_0.cross_attn.attn.q.weight") == 1);
  // The shared table is the only tied tensor, known under its three owners' names.
  const auto tied = tied_parameter_names(m.layers);
  REQUIRE(tied.size() == 1);
  CHECK(tied[0] == std::vector<std::string>{"src_embed.shared_embedding",
                                            "tgt_embed.shared_embedding",
                                            "output.shared_embedding"});
  // named_state lists every owner's name (what checkpoints take).
  CHECK(named_state(m.layers).size() == params.size() + 2);
}

TEST_CASE("transformer: paper presets and their sizes") {
  auto c = models::transformer_preset("T(6,8192,16)");
  CHECK(c.layers == 6);
  CHECK(c.ffn == 8192);
  CHECK(c.heads == 16);
  // Per encoder layer 4(D^2+D) + 2DH + H + D + 4D, decoder adds 4(D^2+D) + 2D.
  const int64_t d = 1024, h = 8192;
  const int64_t enc = 4 * (d * d + d) + 2 * d * h + h + d + 4 * d;
  const int64_t dec = enc + 4 * (d * d + d) + 2 * d;
  CHECK(models::transformer_parameter_count(c) == 32000 * d + 6 * (enc + dec) + 4 * d);
  CHECK_THROWS_WITH(models::transformer_preset("T(7,1,1)"), Contains("known: T(12,16384,32)"));
}

TEST_CASE("transformer: forward shapes, spec inference and a causal decoder") {
  Model m = models::transformer(tiny());
  Tensor src = Tensor::from_vector<int64_t>({5, 6, 7, 0, 8, 9, 10, 11}, Shape{2, 4});
  Tensor tgt = Tensor::from_vector<int64_t>({1, 4, 5, 1, 6, 7}, Shape{2, 3});
  Bundle out = run_layers(m.layers, {src, tgt});
  REQUIRE(out.size() == 1);
  CHECK(out[0].shape() == Shape{2, 3, 20});
  BundleSpec spec = infer_specs(m.layers, spec_of({src, tgt}));
  CHECK(spec[0].shape == Shape{2, 3, 20});
  // Changing a later target token must not change earlier positions' logits.
  Tensor tgt2 = tgt.clone();
  tgt2.set({0, 2}, 9);
  Bundle out2 = run_layers(m.layers, {src, tgt2});
  for (int64_t v = 0; v < 20; ++v) {
    CHECK(out2[0].at({0, 0, v}) == Approx(out[0].at({0, 0, v})).margin(1e-6));
    CHECK(out2[0].at({0, 1, v}) == Approx(out[0].at({0, 1, v})).margin(1e-6));
  }
  CHECK_THROWS_WITH(run_layers(m.layers, {src}), Contains("expected a bundle of 2 tensors"));
}

TEST_CASE("transformer: overfits a tiny batch") {
  Model m = models::transformer(tiny());
  Tensor src = Tensor::from_vector<int64_t>({5, 6, 7, 8, 9, 10, 11, 12}, Shape{2, 4});
  Tensor tgt_in = Tensor::from_vector<int64_t>({1, 13, 14, 1, 15, 16}, Shape{2, 3});
  Tensor tgt_out = Tensor::from_vector<int64_t>({13, 14, 2, 15, 16, 2}, Shape{2, 3});
  std::vector<Tensor> params;
  std::unordered_set<TensorImpl*> seen;
  for (auto& l : m.layers)
    for (auto& p : l->parameters())
      if (seen.insert(p.tensor->impl_ptr().get()).second) params.push_back(*p.tensor);
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    Tensor loss = m.loss->mean(run_layers(m.layers, {src, tgt_in}), {tgt_out});
    if (step == 0) first = loss.item();
    last = loss.item();
    loss.backward();
    NoGradGuard ng;
    for (Tensor& p : params) {
      p.copy_from(ops::sub(p, ops::mul_scalar(p.grad(), 0.1)));
      p.zero_grad();
    }
  }
  INFO("loss " << first << " -> " << last);
  CHECK(first > 2.0);
  CHECK(last < 0.05);
}
