// Generation (tools/train/generate.h): through a pipeline of K cells with a
// KV cache per layer, greedy tokens equal those of re-running the whole
// prefix each step (the reference), for GPT-2 and Llama, prompts of several
// lengths at once; sampling repeats under a seed, top-k = 1 is greedy, and a
// prompt that does not fit the context is refused naming the figure.
#include "tools/train/generate.h"

#include <catch2/catch.hpp>

#include "models/lm.h"
#include "tools/train/task.h"

using namespace gpipe;
using namespace gpipe::train;
using Catch::Contains;

namespace {

models::LmConfig tiny(const std::string& arch) {
  models::LmConfig c = models::lm_default(arch);
  c.layers = 2;
  c.dim = 32;
  c.heads = 4;
  c.kv_heads = arch == "llama" ? 2 : 0;
  c.ffn = 48;
  c.vocab = 40;
  c.context = 24;
  c.seed = 21;
  return c;
}

std::unique_ptr<Pipeline> make_pipe(const std::string& arch, int k) {
  const Batch sample{{Tensor::from_vector(std::vector<int64_t>(4, 1), Shape{2, 2})}, {}};
  auto pipe =
      std::make_unique<Pipeline>(models::language_model(tiny(arch)),
                                 PipelineOptions{.K = k, .M = 2, .threads_per_stage = 1}, sample);
  pipe->train(false);
  return pipe;
}

const std::vector<std::vector<int64_t>> kPrompts = {{3, 4, 5}, {7, 8}, {9, 10, 11}, {12}};

}  // namespace

TEST_CASE("generate: cached greedy tokens equal re-running the prefix, K = 1 and 3") {
  for (const std::string arch : {"gpt2", "llama"})
    for (int k : {1, 3}) {
      INFO(arch << " K=" << k);
      const auto owner = make_pipe(arch, k);
      Pipeline& pipe = *owner;
      SamplingOptions s{.max_new_tokens = 12};
      const auto cached = generate(pipe, kPrompts, s, 24, 2);
      s.cached = false;
      const auto full = generate(pipe, kPrompts, s, 24, 2);
      REQUIRE(cached.size() == kPrompts.size());
      CHECK(cached == full);
      for (const auto& row : cached) CHECK(row.size() == 12);
    }
}

TEST_CASE("generate: sampling repeats under a seed; top-k = 1 is greedy; a stop id ends a row") {
  const auto owner = make_pipe("llama", 2);
  Pipeline& pipe = *owner;
  SamplingOptions greedy{.max_new_tokens = 8};
  SamplingOptions s{.max_new_tokens = 8, .temperature = 1.5, .seed = 5};
  const auto a = generate(pipe, kPrompts, s, 24, 2), b = generate(pipe, kPrompts, s, 24, 2);
  CHECK(a == b);
  s.seed = 6;
  CHECK(generate(pipe, kPrompts, s, 24, 2) != a);
  s.top_k = 1;
  CHECK(generate(pipe, kPrompts, s, 24, 2) == generate(pipe, kPrompts, greedy, 24, 2));
  // The first greedy token of prompt 0 as the stop id: that row ends empty.
  const auto g = generate(pipe, kPrompts, greedy, 24, 2);
  greedy.stop_id = g[0][0];
  CHECK(generate(pipe, kPrompts, greedy, 24, 2)[0].empty());
}

TEST_CASE("generate: nucleus sampling keeps the smallest set holding top-p") {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingOptions s{.temperature = 1, .top_p = 0.6};
  // Kept: ids 0 and 1 (0.5 + 0.3 >= 0.6), renormalised to 0.625 / 0.375.
  CHECK(sample_next(logits, s, 0.0) == 0);
  CHECK(sample_next(logits, s, 0.6) == 0);
  CHECK(sample_next(logits, s, 0.7) == 1);
  CHECK(sample_next(logits, s, 0.999) == 1);
  s.top_p = 1;
  CHECK(sample_next(logits, s, 0.9) == 2);
  CHECK(sample_next(logits, {}, 0.9) == 0);  // greedy
}

TEST_CASE("generate: a prompt and --max-new-tokens past the context are refused up front") {
  const auto owner = make_pipe("gpt2", 1);
  Pipeline& pipe = *owner;
  CHECK_THROWS_WITH(generate(pipe, {{1, 2, 3}}, {.max_new_tokens = 22}, 24, 1),
                    Contains("prompt 1: 3 tokens + --max-new-tokens=22 = 25 positions, more than "
                             "the model's context of 24"));
  CHECK_THROWS_WITH(generate(pipe, {{}}, {}, 24, 1), Contains("prompt 1 is empty"));
}
