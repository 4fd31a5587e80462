// Micro-batches: a mini-batch of N examples cut along axis 0 of every tensor
// into M pieces of sizes differing by at most one (the first N % M pieces one
// larger). Pieces are views: no copy.
#pragma once

#include <vector>

#include "core/bundle.h"
#include "layers/layer.h"

namespace gpipe {

// Batch (inputs, targets) is defined in core/bundle.h.

// Number of examples: the common size of axis 0; throws if tensors disagree.
int64_t batch_size(const Batch& b);
std::vector<int64_t> micro_batch_sizes(int64_t n, int64_t m);
// Throws for M < 1 or M > N.
std::vector<Batch> split_micro_batches(const Batch& b, int64_t m);
// Replica r's share when n rows are cut into `pieces` micro-batches (the
// first pieces % R replicas take one piece more): the rows [begin, begin +
// len) of its pieces, and how many pieces they are.
struct ReplicaShare {
  int64_t begin = 0, len = 0;
  int pieces = 0;
};
ReplicaShare replica_share(int64_t n, int pieces, int replica, int replicas);
// Just replica r's piece count (what a stage that has no rows to cut needs).
int replica_pieces(int pieces, int replica, int replicas);
// Concatenates bundles along axis 0 (inverse of the split for outputs).
Bundle merge_micro_batches(const std::vector<Bundle>& parts);

}  // namespace gpipe
