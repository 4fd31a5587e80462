#include "tools/train/decode.h"

#include "ops/reduce.h"
#include "ops/shape.h"

namespace gpipe::train {

std::vector<std::vector<int64_t>> greedy_decode(Pipeline& pipe, const Tensor& src, int64_t max_len,
                                                int64_t bos, int64_t eos, int64_t pad,
                                                DecodeMode mode) {
  GPIPE_CHECK(max_len >= 1, "greedy_decode: max_len must be >= 1, got ", max_len);
  GPIPE_CHECK(src.rank() == 2, "greedy_decode: expected src [B, S], got ", src.shape());
  const int64_t b = src.size(0);
  std::vector<std::vector<int64_t>> out(b);
  std::vector<bool> done(b, false);
  std::vector<int64_t> tgt(b, bos);  // [B, t] row-major
  int64_t remaining = b;
  DecodeSession session;
  std::vector<int64_t> newest(b, bos);  // [B, 1]: what the cached form feeds
  for (int64_t t = 1; t <= max_len && remaining > 0; ++t) {
    const Tensor logits =
        mode == DecodeMode::kCached
            ? pipe.predict({src, Tensor::from_vector(newest, Shape{b, 1})},
                           {.session = &session})[0]                          // [B, 1, V]
            : pipe.predict({src, Tensor::from_vector(tgt, Shape{b, t})})[0];  // [B, t, V]
    const std::vector<int64_t> next =
        ops::argmax(ops::narrow(logits, 1, logits.size(1) - 1, 1), -1).to_vector<int64_t>();
    std::vector<int64_t> grown;
    grown.reserve(static_cast<size_t>(b * (t + 1)));
    for (int64_t i = 0; i < b; ++i) {
      grown.insert(grown.end(), tgt.begin() + i * t, tgt.begin() + (i + 1) * t);
      newest[i] = done[i] ? pad : next[i];
      if (done[i]) {
        grown.push_back(pad);
        continue;
      }
      grown.push_back(next[i]);
      if (next[i] == eos) {
        done[i] = true;
        --remaining;
      } else {
        out[i].push_back(next[i]);
      }
    }
    tgt = std::move(grown);
  }
  return out;
}

}  // namespace gpipe::train
