// Batch: one mini-batch as the data pipeline hands it to a training step and
// as the pipeline cuts it into micro-batches. The single definition shared by
// data/ (which makes batches) and pipeline/ (which consumes them); it needs
// only //core, so data/ can use it without depending on the layer library.
//
// Every tensor is batch-major (axis 0 is the example).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace gpipe {

// The small ordered list of tensors that flows between layers (also declared,
// identically, in layers/layer.h; redeclaring an alias to the same type is legal).
using Bundle = std::vector<Tensor>;

struct Batch {
  Bundle inputs;   // what the first cell consumes
  Bundle targets;  // what the loss consumes
};

}  // namespace gpipe
