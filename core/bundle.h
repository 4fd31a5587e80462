// The plain vocabulary the floors above core/ share, declared once here:
//
//  - Bundle: the small ordered list of tensors that flows between layers and
//    between pipeline stages (e.g. encoder output plus decoder state);
//  - TensorSpec / BundleSpec: a tensor's (a bundle's) shapes and dtypes
//    without data, what Layer::output_spec and Layer::cost reason about;
//  - Batch: one mini-batch as the data pipeline hands it to a training step
//    and as the pipeline cuts it into micro-batches;
//  - NamedTensor: a tensor under its full name, what optimizers and
//    checkpoints take.
//
// Every tensor in a Bundle or Batch is batch-major (axis 0 is the example),
// which is how a pipeline splits it into micro-batches. Types only: no
// layer, op or runtime code, so data/, optim/ and runtime/ can use them.
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace gpipe {

using Bundle = std::vector<Tensor>;

struct TensorSpec {
  Shape shape;
  DType dtype = DType::kFloat32;
  bool operator==(const TensorSpec&) const = default;
};
using BundleSpec = std::vector<TensorSpec>;

BundleSpec spec_of(const Bundle& b);
std::string to_string(const BundleSpec& spec);

struct Batch {
  Bundle inputs;   // what the first cell consumes
  Bundle targets;  // what the loss consumes
};

struct NamedTensor {
  std::string name;
  Tensor* tensor;  // points into the owning layer; stable for the layer's lifetime
};

}  // namespace gpipe
