// Note [Pipelined generation]. Generation reuses the pipeline's forward-only
// program (Pipeline::predict): a batch of prompts of one length is fed whole
// once (the prefill), then only each row's newest token, with a DecodeSession
// holding every layer's keys and values per micro-batch, so the K cells work
// on different micro-batches at once as in predict. Rows that have stopped
// keep being fed (their tokens ignored) so the micro-batches keep their shape.
// Sampling: logits / temperature, then top-k, then top-p (nucleus) over the
// remaining mass; a seeded draw per (row, step) makes a run repeatable.
#include "tools/train/generate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/rng.h"
#include "ops/ops.h"

namespace gpipe::train {

int64_t sample_next(const std::vector<float>& logits, const SamplingOptions& opt, double draw) {
  const int64_t v = static_cast<int64_t>(logits.size());
  if (opt.temperature <= 0) return std::max_element(logits.begin(), logits.end()) - logits.begin();
  std::vector<int64_t> ids(static_cast<size_t>(v));
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  if (opt.top_k > 0 && opt.top_k < v) ids.resize(static_cast<size_t>(opt.top_k));
  std::vector<double> p(ids.size());
  const double top = logits[ids[0]];
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    sum += p[i] = std::exp((logits[ids[i]] - top) / opt.temperature);
  size_t keep = ids.size();
  if (opt.top_p < 1) {
    double mass = 0;
    for (keep = 0; keep < ids.size();) {
      mass += p[keep++] / sum;
      if (mass >= opt.top_p) break;
    }
    sum = std::accumulate(p.begin(), p.begin() + static_cast<int64_t>(keep), 0.0);
  }
  double at = draw * sum;
  for (size_t i = 0; i < keep; ++i) {
    at -= p[i];
    if (at < 0) return ids[i];
  }
  return ids[keep - 1];
}

namespace {

// One batch of equal-length prompts; returns each row's new ids.
std::vector<std::vector<int64_t>> generate_batch(Pipeline& pipe,
                                                 const std::vector<std::vector<int64_t>>& rows,
                                                 const SamplingOptions& opt, int micro_batches) {
  const int64_t b = static_cast<int64_t>(rows.size()), t0 = static_cast<int64_t>(rows[0].size());
  std::vector<int64_t> all;  // [B, t] row-major, the prefixes
  for (const auto& r : rows) all.insert(all.end(), r.begin(), r.end());
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(b));
  std::vector<bool> done(static_cast<size_t>(b), false);
  DecodeSession session;
  const int pieces = static_cast<int>(std::min<int64_t>(b, std::max(1, micro_batches)));
  std::vector<int64_t> newest = all;  // the prefill feeds the whole prompts
  int64_t width = t0, remaining = b;
  for (int64_t step = 0; step < opt.max_new_tokens && remaining > 0; ++step) {
    const int64_t t = t0 + step;
    const Tensor logits =
        opt.cached
            ? pipe.predict({Tensor::from_vector(newest, Shape{b, width})},
                           {.micro_batches = pieces, .session = &session})[0]
            : pipe.predict({Tensor::from_vector(all, Shape{b, t})}, {.micro_batches = pieces})[0];
    const Tensor last = ops::cast(ops::narrow(logits, 1, logits.size(1) - 1, 1), DType::kFloat32);
    const std::vector<float> flat = last.contiguous().to_vector<float>();
    const int64_t v = last.size(2);
    std::vector<int64_t> grown;
    grown.reserve(static_cast<size_t>(b * (t + 1)));
    newest.assign(static_cast<size_t>(b), 0);
    for (int64_t i = 0; i < b; ++i) {
      const std::vector<float> row(flat.begin() + i * v, flat.begin() + (i + 1) * v);
      const double draw = static_cast<double>(mix_key(mix_key(opt.seed, static_cast<uint64_t>(i)),
                                                      static_cast<uint64_t>(step)) >>
                                              11) *
                          0x1.0p-53;
      const int64_t next = sample_next(row, opt, draw);
      grown.insert(grown.end(), all.begin() + i * t, all.begin() + (i + 1) * t);
      grown.push_back(next);
      newest[i] = next;
      if (done[i]) continue;
      if (next == opt.stop_id) {
        done[i] = true;
        --remaining;
      } else {
        out[i].push_back(next);
      }
    }
    all = std::move(grown);
    width = 1;
  }
  return out;
}

}  // namespace

std::vector<std::vector<int64_t>> generate(Pipeline& pipe,
                                           const std::vector<std::vector<int64_t>>& prompts,
                                           const SamplingOptions& opt, int64_t context,
                                           int micro_batches) {
  GPIPE_CHECK(opt.max_new_tokens >= 1, "--max-new-tokens: expected >= 1, got ", opt.max_new_tokens);
  GPIPE_CHECK(opt.temperature >= 0 && opt.top_k >= 0 && opt.top_p > 0 && opt.top_p <= 1,
              "sampling: expected --temperature >= 0, --top-k >= 0 and 0 < --top-p <= 1");
  std::map<size_t, std::vector<size_t>> by_length;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GPIPE_CHECK(!prompts[i].empty(), "prompt ", i + 1, " is empty (nothing to continue)");
    const int64_t need = static_cast<int64_t>(prompts[i].size()) + opt.max_new_tokens;
    GPIPE_CHECK(need <= context, "prompt ", i + 1, ": ", prompts[i].size(), " tokens + ",
                "--max-new-tokens=", opt.max_new_tokens, " = ", need,
                " positions, more than the model's context of ", context);
    by_length[prompts[i].size()].push_back(i);
  }
  std::vector<std::vector<int64_t>> out(prompts.size());
  for (const auto& [length, which] : by_length) {
    std::vector<std::vector<int64_t>> rows;
    for (size_t i : which) rows.push_back(prompts[i]);
    const auto got = generate_batch(pipe, rows, opt, micro_batches);
    for (size_t j = 0; j < which.size(); ++j) out[which[j]] = got[j];
  }
  return out;
}

}  // namespace gpipe::train
