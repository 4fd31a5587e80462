// Partitioning: cut a sequence of n layers with costs c_0..c_{n-1} into K
// contiguous, non-empty cells.
//
// balanced_partition is exact: it minimises the largest cell cost (the
// pipeline's bottleneck) by dynamic programming over (prefix, cells), then,
// among all partitions with that optimal bottleneck, picks the one with the
// smallest sum of squared cell costs (smallest variance, as the total is
// fixed). O(K n^2) time, so any real layer count is instant; beyond
// K n^2 = 2e8 (thousands of layers on many cells) the bottleneck is found by
// bisection instead and the spread is not minimised (Note [Large partitions]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {

struct Partition {
  std::vector<int64_t> bounds;     // K + 1 layer offsets: cell k = layers [bounds[k], bounds[k+1])
  std::vector<double> cell_costs;  // K sums of the costs used to cut
  int64_t cells() const { return static_cast<int64_t>(cell_costs.size()); }
  int64_t begin(int64_t k) const { return bounds[k]; }
  int64_t end(int64_t k) const { return bounds[k + 1]; }
  double bottleneck() const;
  std::string str() const;  // "[0, 3) [3, 7) ..."
};

// Throws gpipe::Error for K < 1, K > n, or a negative / non-finite cost.
Partition balanced_partition(const std::vector<double>& costs, int64_t k);

// Cells of the given sizes ("--balance=4,4,3,3"); sizes must be positive and
// sum to costs.size(). cell_costs are filled from `costs`.
Partition explicit_partition(const std::vector<int64_t>& sizes, const std::vector<double>& costs);

// Parses "4,4,3,3"; throws naming the text on anything else.
std::vector<int64_t> parse_balance(const std::string& text);

}  // namespace gpipe
