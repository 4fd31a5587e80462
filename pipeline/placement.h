// Placement of the cells' parameters on their devices (Note [Tied copies]).
#pragma once

#include <map>
#include <vector>

#include "layers/layer.h"
#include "pipeline/executor.h"
#include "pipeline/partition.h"
#include "pipeline/schedule.h"

namespace gpipe {

// Moves the layers of each cell in `local` to devices[cell]. A tensor used
// by several cells (tied weights) gets its own copy in every cell after its
// first, even on a shared device, so no two ranks ever accumulate into one
// tensor; reduce_tied sums their gradients. Returns, per entry of `local`,
// every tied weight of the model as that cell sees it (its copy, or null).
// `layers` is the whole model, so every rank agrees on the tied list.
std::vector<std::vector<TiedWeight>> place_cells(const LayerList& layers,
                                                 const Partition& partition,
                                                 const std::vector<int>& local,
                                                 const std::vector<Device>& devices);

// For each turn number in cell c's list of `s`, the cell it takes the turn
// from (<T) or hands it to (>T) (see Note [Device turns] in placement.cc).
std::map<int, int> turn_peers(const Schedule& s, int c);

}  // namespace gpipe
