// GPT-2 and Llama (models/lm.h): the presets' parameter counts are Hugging
// Face's, the built model holds exactly the formula's parameters, attention
// is causal, grouped-query attention equals multi-head attention with each
// K / V head repeated for its group, incremental decoding (a KV cache per
// layer) gives the full forward's logits, and a tiny model overfits a batch.
#include "models/lm.h"

#include <catch2/catch.hpp>
#include <unordered_set>

#include "layers/decode.h"
#include "ops/ops.h"

using namespace gpipe;
using Catch::Contains;

namespace {

models::LmConfig tiny(const std::string& arch) {
  models::LmConfig c = models::lm_default(arch);
  c.layers = 2;
  c.dim = 16;
  c.heads = 4;
  c.ffn = 24;
  c.vocab = 23;
  c.context = 12;
  c.seed = 5;
  if (arch == "llama") c.kv_heads = 2;
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

Tensor tokens(std::vector<int64_t> v, int64_t rows) {
  const int64_t t = static_cast<int64_t>(v.size()) / rows;
  return Tensor::from_vector<int64_t>(v, Shape{rows, t});
}

Tensor logits(Model& m, const Tensor& tok) {
  Bundle out = run_layers(m.layers, {tok});
  REQUIRE(out.size() == 1);
  return out[0];
}

}  // namespace

TEST_CASE("lm: the presets' parameter counts are Hugging Face's") {
  // num_parameters() of the published checkpoints' models (a tied table once).
  const std::vector<std::pair<std::string, int64_t>> hf = {
      {"gpt2", 124439808},          {"gpt2-medium", 354823168},    {"gpt2-large", 774030080},
      {"gpt2-xl", 1557611200},      {"llama-3.2-1b", 1235814400},  {"llama-3.2-3b", 3212749824},
      {"llama-3.1-8b", 8030261248}, {"llama-3.1-70b", 70553706496}};
  for (const auto& [name, count] : hf) {
    INFO(name);
    CHECK(models::lm_parameter_count(models::lm_preset(name)) == count);
  }
  CHECK(models::lm_preset_names().size() == hf.size());
  CHECK_THROWS_WITH(models::lm_preset("gpt3"), Contains("known: gpt2, gpt2-large"));
  const models::LmConfig l8 = models::lm_preset("llama-3.1-8b");
  CHECK(l8.rotary.theta == 500000);
  CHECK(l8.rotary.scaling.factor == 8);
  CHECK(!l8.tied);
  CHECK(models::lm_preset("llama-3.2-1b").tied);
}

TEST_CASE("lm: the built model holds the formula's parameters, in 2L + 2 layers") {
  for (const std::string arch : {"gpt2", "llama"}) {
    for (const bool tied : {true, false}) {
      INFO(arch << (tied ? " tied" : " untied"));
      models::LmConfig c = tiny(arch);
      c.tied = tied;
      Model m = models::language_model(c);
      CHECK(unique_params(m) == models::lm_parameter_count(c));
      REQUIRE(static_cast<int64_t>(m.layers.size()) == models::lm_layer_count(c));
      CHECK(m.layers[0]->name() == "embed");
      CHECK(m.layers[1]->name() == "h.0.attn");
      CHECK(m.layers[2]->name() == "h.0.mlp");
      CHECK(m.layers.back()->name() == "head");
      bool shared = false;
      for (auto& p : m.layers.back()->parameters())
        shared |= p.tensor->impl_ptr() == m.layers.front()->parameters()[0].tensor->impl_ptr();
      CHECK(shared == tied);
    }
  }
  models::LmConfig bad = tiny("llama");
  bad.kv_heads = 3;
  CHECK_THROWS_WITH(models::language_model(bad),
                    Contains("heads 4 is not a multiple of kv-heads 3"));
}

TEST_CASE("lm: attention is causal, with and without rotary embedding") {
  for (const std::string arch : {"gpt2", "llama"}) {
    INFO(arch);
    Model m = models::language_model(tiny(arch));
    m.layers[0]->train(false);
    const Tensor a = tokens({3, 4, 5, 6, 7, 8}, 2), b = tokens({3, 4, 9, 6, 7, 1}, 2);
    const Tensor la = logits(m, a), lb = logits(m, b);
    CHECK(la.shape() == Shape{2, 3, 23});
    for (int64_t v = 0; v < 23; ++v) {  // row 0: position 2 changed; row 1: position 2
      CHECK(lb.at({0, 0, v}) == Approx(la.at({0, 0, v})).margin(1e-6));
      CHECK(lb.at({0, 1, v}) == Approx(la.at({0, 1, v})).margin(1e-6));
      CHECK(lb.at({1, 1, v}) == Approx(la.at({1, 1, v})).margin(1e-6));
    }
    CHECK(std::abs(lb.at({0, 2, 0}) - la.at({0, 2, 0})) > 1e-6);
    CHECK_THROWS_WITH(logits(m, tokens(std::vector<int64_t>(13, 1), 1)),
                      Contains("13 tokens are more than the context of 12"));
  }
}

TEST_CASE("lm: grouped-query attention is multi-head attention with K / V heads repeated") {
  // kv head i serves query heads 2i and 2i + 1 (heads 4, kv_heads 2, head dim 4).
  models::LmConfig gqa = tiny("llama"), mha = tiny("llama");
  mha.kv_heads = 4;
  Model g = models::language_model(gqa), h = models::language_model(mha);
  const auto gp = named_parameters(g.layers), hp = named_parameters(h.layers);
  REQUIRE(gp.size() == hp.size());
  NoGradGuard ng;
  for (size_t i = 0; i < gp.size(); ++i) {
    const std::string& n = gp[i].name;
    const bool kv = n.find(".attn.k.weight") != std::string::npos ||
                    n.find(".attn.v.weight") != std::string::npos;
    if (!kv) {
      hp[i].tensor->copy_from(*gp[i].tensor);
      continue;
    }
    // [8, 16] -> [16, 16]: each 4-row head block twice.
    std::vector<Tensor> blocks;
    for (int64_t head = 0; head < 2; ++head)
      for (int rep = 0; rep < 2; ++rep)
        blocks.push_back(ops::narrow(*gp[i].tensor, 0, 4 * head, 4));
    hp[i].tensor->copy_from(ops::concat(blocks, 0));
  }
  const Tensor t = tokens({1, 2, 3, 4, 5, 6, 7, 8}, 2);
  const Tensor lg = logits(g, t), lh = logits(h, t);
  double worst = 0;
  const auto a = lg.to_vector<double>(), b = lh.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  CHECK(worst < 1e-5);
}

TEST_CASE("lm: incremental decoding with a KV cache gives the full forward's logits") {
  for (const std::string arch : {"gpt2", "llama"}) {
    INFO(arch);
    Model m = models::language_model(tiny(arch));
    for (auto& l : m.layers) l->train(false);
    const std::vector<int64_t> seq = {3, 9, 4, 11, 5, 2, 7};
    const Tensor full = logits(m, tokens(seq, 1));
    DecodeSession session;
    // The first 3 tokens at once, then one per step.
    std::vector<Tensor> pieces;
    int64_t at = 0;
    for (const int64_t len : {3, 1, 1, 1, 1}) {
      Bundle x = {tokens(std::vector<int64_t>(seq.begin() + at, seq.begin() + at + len), 1)};
      for (size_t i = 0; i < m.layers.size(); ++i) {
        DecodeScope scope(&session, static_cast<int64_t>(i), 0);
        x = m.layers[i]->forward(x);
      }
      pieces.push_back(x[0]);
      at += len;
    }
    const Tensor inc = ops::concat(pieces, 1);
    REQUIRE(inc.shape() == full.shape());
    const auto a = inc.to_vector<double>(), b = full.to_vector<double>();
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
    CHECK(worst < 1e-5);
  }
}

TEST_CASE("lm: a tiny GPT-2 and a tiny Llama overfit a batch") {
  for (const std::string arch : {"gpt2", "llama"}) {
    INFO(arch);
    Model m = models::language_model(tiny(arch));
    const Tensor in = tokens({1, 5, 6, 7, 8, 9, 2, 10, 11, 12, 13, 14}, 2);
    const Tensor target = tokens({5, 6, 7, 8, 9, -100, 10, 11, 12, 13, 14, 15}, 2);
    std::vector<Tensor> params;
    std::unordered_set<TensorImpl*> seen;
    for (auto& l : m.layers)
      for (auto& p : l->parameters())
        if (seen.insert(p.tensor->impl_ptr().get()).second) params.push_back(*p.tensor);
    double first = 0, last = 0;
    for (int step = 0; step < 120; ++step) {
      Tensor loss = m.loss->mean(run_layers(m.layers, {in}), {target});
      if (step == 0) first = loss.item();
      last = loss.item();
      loss.backward();
      NoGradGuard ng;
      for (Tensor& p : params) {
        p.copy_from(ops::sub(p, ops::mul_scalar(p.grad(), 0.5)));
        p.zero_grad();
      }
    }
    INFO("loss " << first << " -> " << last);
    CHECK(first > 2.5);
    CHECK(last < 0.1);
  }
}

TEST_CASE("lm: with a document mask a packed row's logits are each document's alone") {
  // Three documents packed into one row of 12, each after the first begun by
  // the end-of-text id 22 (as pack() leaves them); alone, each is its own row.
  const std::vector<std::vector<int64_t>> docs = {{3, 4, 5}, {22, 6, 7, 8}, {22, 9, 10, 11, 12}};
  std::vector<int64_t> row;
  for (const auto& d : docs) row.insert(row.end(), d.begin(), d.end());
  for (const std::string arch : {"gpt2", "llama"}) {
    INFO(arch);
    models::LmConfig c = tiny(arch);
    c.document_eot = 22;
    Model masked = models::language_model(c);
    c.document_eot = -1;
    Model plain = models::language_model(c);  // the same weights (the same seed)
    const std::vector<double> packed = logits(masked, tokens(row, 1)).to_vector<double>();
    const std::vector<double> unmasked = logits(plain, tokens(row, 1)).to_vector<double>();
    int64_t start = 0;
    double worst = 0, leak = 0;
    for (const auto& d : docs) {
      const std::vector<double> alone = logits(plain, tokens(d, 1)).to_vector<double>();
      // One document under the mask: one segment, the fused causal kernel.
      const std::vector<double> one = logits(masked, tokens(d, 1)).to_vector<double>();
      for (size_t i = 0; i < alone.size(); ++i)
        worst = std::max(worst, std::abs(alone[i] - one[i]));
      for (size_t i = 0; i < alone.size(); ++i) {
        const size_t at = static_cast<size_t>(start) * static_cast<size_t>(c.vocab) + i;
        worst = std::max(worst, std::abs(alone[i] - packed[at]));
        leak = std::max(leak, std::abs(alone[i] - unmasked[at]));
      }
      start += static_cast<int64_t>(d.size());
    }
    CHECK(worst < 1e-5);  // float32 round-off (Llama's rotary angles differ by the offset)
    CHECK(leak > 1e-3);   // without the mask the later documents see the earlier ones
  }
  // Under the mask the bundle between layers carries the document ids.
  models::LmConfig c = tiny("gpt2");
  c.document_eot = 22;
  const Model m = models::language_model(c);
  const Bundle mid =
      run_layers(LayerList(m.layers.begin(), m.layers.begin() + 2), {tokens(row, 1)});
  REQUIRE(mid.size() == 2);
  CHECK(mid[1].to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2});
}
