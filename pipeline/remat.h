// Note [Remat policy]: rematerialisation (the paper's "re-materialization"):
// which micro-batches a cell runs without keeping its internal activations.
//  - always:      every micro-batch keeps only its input; the cell's forward
//                 is recomputed right before that micro-batch's backward;
//  - except_last: as always, except for micro-batches whose backward follows
//                 their forward with no other compute between them on that
//                 cell (GPipe's last micro-batch; every micro-batch on 1F1B's
//                 last cell): recomputing those would only cost time;
//  - never:       every micro-batch keeps its whole graph.
// The policy is applied when a schedule is built (make_schedule): a
// rematerialised micro-batch is one with an R action in its cell's list.
// A recomputation runs under the same RngContext (same dropout masks) and
// inside RecomputationScope (BatchNorm records no statistics).
#pragma once

#include <string>

namespace gpipe {

enum class RematMode { kAlways, kExceptLast, kNever };

RematMode parse_remat(const std::string& name);  // "always" | "except_last" | "never"
std::string remat_name(RematMode mode);

}  // namespace gpipe
