// Rematerialisation policy (the paper's "re-materialization"): which
// micro-batches a cell runs without keeping its internal activations.
//  - always:      every micro-batch keeps only its input; the cell's forward
//                 is recomputed right before that micro-batch's backward;
//  - except_last: as always, but the last micro-batch keeps its graph (its
//                 backward follows its forward immediately in GPipe, so
//                 recomputing it would only cost time);
//  - never:       every micro-batch keeps its whole graph.
// A recomputation runs under the same RngContext (same dropout masks) and
// inside RecomputationScope (BatchNorm records no statistics).
#pragma once

#include <string>

namespace gpipe {

enum class RematMode { kAlways, kExceptLast, kNever };

RematMode parse_remat(const std::string& name);  // "always" | "except_last" | "never"
std::string remat_name(RematMode mode);
inline bool rematerialises(RematMode mode, int micro_batch, int micro_batches) {
  return mode == RematMode::kAlways || (mode == RematMode::kExceptLast && micro_batch != micro_batches - 1);
}

}  // namespace gpipe
