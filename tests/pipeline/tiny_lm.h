// GPT-2 and Llama small enough for exact comparisons in tests (3 blocks: 8
// layers to cut; grouped-query attention 4:2 for Llama), and token batches
// for them with one ignored target.
#pragma once

#include <string>
#include <vector>

#include "core/bundle.h"
#include "core/rng.h"
#include "models/lm.h"

namespace gpipe::testing {

inline models::LmConfig tiny_lm(const std::string& arch) {
  models::LmConfig c = models::lm_default(arch);
  c.layers = 3;  // 8 layers to cut
  c.dim = 16;
  c.heads = 4;
  c.kv_heads = arch == "llama" ? 2 : 0;
  c.ffn = 24;
  c.vocab = 29;
  c.context = 8;
  c.dropout = 0.0;
  c.seed = 11;
  return c;
}

// n rows of t tokens drawn from `seed`, targets from seed + 1; target 3 is
// ignored (-100).
inline Batch lm_batch(int64_t n, int64_t t, uint64_t seed) {
  std::vector<int64_t> in(static_cast<size_t>(n * t)), out(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<int64_t>(mix_key(seed, i) % 29);
    out[i] = static_cast<int64_t>(mix_key(seed + 1, i) % 29);
  }
  out[3] = -100;  // an ignored target
  return {{Tensor::from_vector(in, Shape{n, t})}, {Tensor::from_vector(out, Shape{n, t})}};
}

}  // namespace gpipe::testing
