// Cached greedy decoding (layers/decode.h) against the full re-run: the same
// logits at every step (to float round-off) and the same tokens, through a
// one-stage and a two-stage pipeline with uneven micro-batches.
#include "tools/train/decode.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "layers/decode.h"
#include "models/transformer.h"
#include "ops/ops.h"

using namespace gpipe;
using Catch::Contains;

namespace {

models::TransformerConfig small() {
  models::TransformerConfig c;
  c.layers = 2;
  c.ffn = 32;
  c.heads = 2;
  c.dim = 16;
  c.vocab = 19;
  c.max_len = 12;
  c.dropout = 0.1;  // off in eval mode; the cache must not depend on it
  c.seed = 3;
  return c;
}

Tensor sources(int64_t n, int64_t len) {
  std::vector<int64_t> v;
  uint64_t x = 77;
  for (int64_t i = 0; i < n * len; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v.push_back(static_cast<int64_t>(3 + (x >> 33) % 16));
  }
  for (int64_t i = 0; i < n; i += 2) v[i * len + len - 1] = 0;  // padding in every other source
  return Tensor::from_vector(v, Shape{n, len});
}

std::unique_ptr<Pipeline> make(int k, int m) {
  const Tensor src = sources(5, 6);
  const Batch sample{{src, Tensor::zeros(Shape{5, 3}, DType::kInt64)},
                     {Tensor::zeros(Shape{5, 3}, DType::kInt64)}};
  PipelineOptions options;
  options.K = k;
  options.M = m;
  auto pipe = std::make_unique<Pipeline>(models::transformer(small()), options, sample);
  pipe->train(false);
  return pipe;
}

}  // namespace

TEST_CASE("decode: each cached step's logits equal the full re-run's last position") {
  for (auto [k, m] : {std::pair{1, 1}, std::pair{2, 2}, std::pair{3, 3}}) {
    INFO("K=" << k << " M=" << m);
    auto owner = make(k, m);
    Pipeline& pipe = *owner;
    const Tensor src = sources(5, 6);
    DecodeSession session;
    std::vector<int64_t> prefix(5, 1);  // BOS = 1 for every row; then fixed tokens
    for (int64_t t = 1; t <= 6; ++t) {
      std::vector<int64_t> newest;
      for (int64_t i = 0; i < 5; ++i) newest.push_back(prefix[i * t + t - 1]);
      const Tensor cached =
          pipe.predict({src, Tensor::from_vector(newest, Shape{5, 1})}, {.session = &session})[0];
      const Tensor full = pipe.predict({src, Tensor::from_vector(prefix, Shape{5, t})})[0];
      REQUIRE(cached.shape() == Shape{5, 1, 19});
      const std::vector<float> a = cached.contiguous().to_vector<float>();
      const std::vector<float> b = ops::narrow(full, 1, t - 1, 1).contiguous().to_vector<float>();
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
      CHECK(worst < 1e-4);
      std::vector<int64_t> grown;
      for (int64_t i = 0; i < 5; ++i) {
        grown.insert(grown.end(), prefix.begin() + i * t, prefix.begin() + (i + 1) * t);
        grown.push_back(3 + (i * 7 + t) % 15);
      }
      prefix = grown;
    }
  }
}

TEST_CASE("decode: cached greedy decoding produces the full re-run's tokens") {
  auto owner = make(2, 2);
  Pipeline& pipe = *owner;
  const Tensor src = sources(5, 6);
  const auto cached = train::greedy_decode(pipe, src, 10, 1, 2, 0, train::DecodeMode::kCached);
  const auto full = train::greedy_decode(pipe, src, 10, 1, 2, 0, train::DecodeMode::kFullRerun);
  CHECK(cached == full);
  size_t tokens = 0;
  for (const auto& row : cached) tokens += row.size();
  CHECK(tokens > 0);
}

TEST_CASE("decode: more than one new position after the first step, or other rows, are refused") {
  auto owner = make(1, 1);
  Pipeline& pipe = *owner;
  const Tensor src = sources(5, 6);
  DecodeSession session;
  pipe.predict({src, Tensor::zeros(Shape{5, 1}, DType::kInt64)}, {.session = &session});
  CHECK_THROWS_WITH(
      pipe.predict({src, Tensor::zeros(Shape{5, 2}, DType::kInt64)}, {.session = &session}),
      Contains("feed one new position per step"));
  // A failed call ends the session; a new one must keep the rows it starts with.
  DecodeSession other;
  pipe.predict({src, Tensor::zeros(Shape{5, 1}, DType::kInt64)}, {.session = &other});
  CHECK_THROWS_WITH(
      pipe.predict({sources(4, 6), Tensor::zeros(Shape{4, 1}, DType::kInt64)}, {.session = &other}),
      Contains("started with 5 rows in 1 micro-batches, but this call has 4 rows"));
}
