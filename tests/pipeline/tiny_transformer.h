// A Transformer small enough for exact comparisons in tests, and token
// batches for it (with padding in the sources and one ignored label).
#pragma once

#include <vector>

#include "core/bundle.h"
#include "models/transformer.h"

namespace gpipe::testing {

inline models::TransformerConfig tiny(double dropout = 0.0) {
  models::TransformerConfig c;
  c.layers = 2;
  c.ffn = 24;
  c.heads = 2;
  c.dim = 8;
  c.vocab = 17;
  c.max_len = 8;
  c.dropout = dropout;
  c.seed = 11;
  return c;
}

inline Batch token_batch(int64_t n, uint64_t seed) {
  std::vector<int64_t> src, tin, tout;
  uint64_t x = seed;
  auto next = [&] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>(3 + (x >> 33) % 14);
  };
  for (int64_t i = 0; i < n * 5; ++i) src.push_back(next());
  for (int64_t i = 0; i < n * 4; ++i) tin.push_back(next());
  for (int64_t i = 0; i < n * 4; ++i) tout.push_back(next());
  // Some padding: the last source token of every other example, and one ignored label.
  for (int64_t i = 0; i < n; i += 2) src[i * 5 + 4] = 0;
  tout[3] = 0;
  return {{Tensor::from_vector(src, Shape{n, 5}), Tensor::from_vector(tin, Shape{n, 4})},
          {Tensor::from_vector(tout, Shape{n, 4})}};
}

}  // namespace gpipe::testing
