// Balance: what the partitioner weighs each layer by (the paper's c_i).
//  - cost:   the layer's own estimate (FLOPs of forward + backward);
//  - time:   measured forward + backward seconds on a sample micro-batch;
//  - memory: bytes of parameters, gradients and Adam moments plus the
//            layer's output activations.
#pragma once

#include <string>
#include <vector>

#include "layers/layer.h"

namespace gpipe {

enum class BalanceBy { kCost, kTime, kMemory };
BalanceBy parse_balance_by(const std::string& name);  // "cost" | "time" | "memory"
const char* balance_unit(BalanceBy by);               // "FLOPs" | "seconds" | "bytes"

// Per-layer weights. `specs[i]` is layer i's input spec (specs has one
// more entry: the model's output); `sample` one micro-batch's inputs,
// used only by kTime (which runs every layer on it twice).
std::vector<double> layer_costs(const LayerList& layers, const std::vector<BundleSpec>& specs,
                                BalanceBy by, const Bundle& sample);

}  // namespace gpipe
