// Test rows in chunks of kEvalChunkBatches batches, one predict call each
// (split into eval_micro_batches micro-batches).
#include "tools/train/image_eval.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "core/allocator.h"
#include "data/metrics.h"

namespace gpipe::train {

EvalResult evaluate_images(Pipeline& pipe, const TrainConfig& c, const ImageEvalSpec& spec) {
  const auto t0 = std::chrono::steady_clock::now();
  EvalMode eval(pipe);
  CrossEntropyLoss loss;
  EvalResult r;
  AccuracyCount acc;
  int64_t inter = 0, uni = 0;
  double sum = 0;
  const int64_t n = spec.examples;
  const int64_t limit = c.eval_batches > 0 ? std::min(n, c.eval_batches * c.batch) : n;
  const int64_t chunk = kEvalChunkBatches * c.batch;
  for (int64_t first = 0; first < limit; first += chunk) {
    std::vector<int64_t> rows;
    for (int64_t i = first; i < std::min(limit, first + chunk); ++i) rows.push_back(i);
    std::optional<MemoryCategoryGuard> cat;
    if (spec.workspace) cat.emplace(MemoryCategory::kWorkspace);
    const auto [x, y] = spec.batch(rows);
    const Bundle out = pipe.predict(
        {x}, {.micro_batches = eval_micro_batches(c, static_cast<int64_t>(rows.size()))});
    const Tensor labels = y.to(out[0].device());
    sum += loss.sum(out, {labels}).item();
    const AccuracyCount a = count_correct(out[0], labels);
    acc.correct += a.correct;
    acc.total += a.total;
    if (spec.overlap) spec.overlap(out[0], labels, inter, uni);
  }
  if (spec.overlap) r.iou = uni > 0 ? static_cast<double>(inter) / static_cast<double>(uni) : 1.0;
  r.examples = limit;
  r.loss = acc.total > 0 ? sum / static_cast<double>(acc.total) : 0.0;
  r.accuracy = acc.value();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace gpipe::train
