// The image tasks' evaluation, shared by Fashion-MNIST and the user's
// images: held-out loss and top-1 (U-Net: per-pixel) accuracy over the
// first test rows, and U-Net's IoU.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "pipeline/pipeline.h"
#include "tools/train/config.h"
#include "tools/train/task.h"

namespace gpipe::train {

struct ImageEvalSpec {
  // Test rows 0..examples-1 are evaluated (the first --eval-batches batches
  // of them when given), kEvalChunkBatches batches at a time.
  int64_t examples = 0;
  // Whether a chunk's allocations are charged to MemoryCategory::kWorkspace.
  bool workspace = false;
  // The images and the labels (U-Net: per-pixel classes) of some test rows.
  std::function<std::pair<Tensor, Tensor>(const std::vector<int64_t>& rows)> batch;
  // U-Net: adds the pixels both predicted and labelled as foreground to
  // `inter` and those either is to `uni`. Empty: no IoU.
  std::function<void(const Tensor& logits, const Tensor& labels, int64_t& inter, int64_t& uni)>
      overlap;
};

// Loss (a mean over its terms: pixels for U-Net; examples are images),
// accuracy and, with spec.overlap, IoU, with `pipe` in eval mode for the call.
EvalResult evaluate_images(Pipeline& pipe, const TrainConfig& c, const ImageEvalSpec& spec);

}  // namespace gpipe::train
