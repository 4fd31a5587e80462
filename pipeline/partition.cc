// Note [Exact partitioning]: best[j][i] is the smallest possible bottleneck
// for the first i layers in j cells, best[j][i] = min over split s of
// max(best[j-1][s], cost(s, i)). With the optimal bottleneck B known, a second
// pass minimises the sum of squared cell costs subject to every cell <= B
// (within a relative tolerance for float sums), and backtracks the cuts.
#include "pipeline/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace gpipe {

double Partition::bottleneck() const {
  return cell_costs.empty() ? 0.0 : *std::max_element(cell_costs.begin(), cell_costs.end());
}

std::string Partition::str() const {
  std::ostringstream os;
  for (int64_t k = 0; k < cells(); ++k)
    os << (k ? " " : "") << "[" << begin(k) << ", " << end(k) << ")";
  return os.str();
}

namespace {

// Note [Large partitions]: for thousands of layers on many cells the
// dynamic programme's K n^2 steps take seconds; the optimal bottleneck is
// then found by bisection (a bound is feasible when filling cells greedily
// up to it needs at most K cells), and the cuts fill each cell up to it
// from the left, splitting the largest cells while there are fewer than K.
// The bottleneck is still optimal (to 1e-12 relative); the spread of the
// other cells is not minimised.
Partition greedy_partition(const std::vector<double>& costs, const std::vector<double>& prefix,
                           int64_t k) {
  const int64_t n = static_cast<int64_t>(costs.size());
  auto cells_needed = [&](double bound) {
    int64_t cells = 1;
    double sum = 0;
    for (double c : costs) {
      if (c > bound) return n + 1;
      if (sum + c > bound) ++cells, sum = 0;
      sum += c;
    }
    return cells;
  };
  double lo = *std::max_element(costs.begin(), costs.end()), hi = prefix[n];
  for (int it = 0; it < 200 && hi - lo > 1e-12 * std::max(1.0, hi); ++it) {
    const double mid = 0.5 * (lo + hi);
    (cells_needed(mid) <= k ? hi : lo) = mid;
  }
  Partition p;
  p.bounds.push_back(0);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0 && sum + costs[i] > hi) {
      p.bounds.push_back(i);
      sum = 0;
    }
    sum += costs[i];
  }
  p.bounds.push_back(n);
  while (static_cast<int64_t>(p.bounds.size()) - 1 < k) {
    // Split the largest cell of two or more layers at its middle by cost.
    int64_t best = -1;
    for (size_t c = 0; c + 1 < p.bounds.size(); ++c)
      if (p.bounds[c + 1] - p.bounds[c] >= 2 &&
          (best < 0 || prefix[p.bounds[c + 1]] - prefix[p.bounds[c]] >
                           prefix[p.bounds[best + 1]] - prefix[p.bounds[best]]))
        best = static_cast<int64_t>(c);
    const int64_t a = p.bounds[best], b = p.bounds[best + 1];
    int64_t m = a + 1;
    while (m + 1 < b && prefix[m + 1] - prefix[a] <= 0.5 * (prefix[b] - prefix[a])) ++m;
    p.bounds.insert(p.bounds.begin() + best + 1, m);
  }
  for (size_t c = 0; c + 1 < p.bounds.size(); ++c)
    p.cell_costs.push_back(prefix[p.bounds[c + 1]] - prefix[p.bounds[c]]);
  return p;
}

}  // namespace

Partition balanced_partition(const std::vector<double>& costs, int64_t k) {
  const int64_t n = static_cast<int64_t>(costs.size());
  GPIPE_CHECK(k >= 1, "partition: the number of cells K must be >= 1, got ", k);
  GPIPE_CHECK(k <= n, "partition: K = ", k, " cells need at least ", k,
              " layers, but the model has ", n);
  for (int64_t i = 0; i < n; ++i)
    GPIPE_CHECK(std::isfinite(costs[i]) && costs[i] >= 0, "partition: layer ", i, " has cost ",
                costs[i], " (expected a finite value >= 0)");
  std::vector<double> prefix(n + 1, 0.0);
  for (int64_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  auto cell = [&](int64_t a, int64_t b) { return prefix[b] - prefix[a]; };
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (static_cast<double>(k) * static_cast<double>(n) * static_cast<double>(n) > 2e8)
    return greedy_partition(costs, prefix, k);

  // Pass 1: optimal bottleneck.
  std::vector<std::vector<double>> best(k + 1, std::vector<double>(n + 1, kInf));
  best[0][0] = 0;
  for (int64_t j = 1; j <= k; ++j)
    for (int64_t i = j; i <= n - (k - j); ++i)
      for (int64_t s = j - 1; s < i; ++s)
        best[j][i] = std::min(best[j][i], std::max(best[j - 1][s], cell(s, i)));
  const double bound = best[k][n];
  const double tol = 1e-9 * std::max(1.0, bound);

  // Pass 2: smallest sum of squares with every cell <= bound.
  std::vector<std::vector<double>> sq(k + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int64_t>> cut(k + 1, std::vector<int64_t>(n + 1, -1));
  sq[0][0] = 0;
  for (int64_t j = 1; j <= k; ++j)
    for (int64_t i = j; i <= n - (k - j); ++i)
      for (int64_t s = j - 1; s < i; ++s) {
        const double c = cell(s, i);
        if (c > bound + tol || sq[j - 1][s] == kInf) continue;
        const double v = sq[j - 1][s] + c * c;
        if (v < sq[j][i]) {
          sq[j][i] = v;
          cut[j][i] = s;
        }
      }
  GPIPE_ASSERT(cut[k][n] >= 0, "no partition within the optimal bottleneck");
  Partition p;
  p.bounds.assign(k + 1, 0);
  p.bounds[k] = n;
  for (int64_t j = k, i = n; j > 0; --j) {
    i = cut[j][i];
    p.bounds[j - 1] = i;
  }
  for (int64_t j = 0; j < k; ++j) p.cell_costs.push_back(cell(p.bounds[j], p.bounds[j + 1]));
  return p;
}

Partition explicit_partition(const std::vector<int64_t>& sizes, const std::vector<double>& costs) {
  GPIPE_CHECK(!sizes.empty(), "balance: no cell sizes given");
  Partition p;
  p.bounds.push_back(0);
  for (size_t j = 0; j < sizes.size(); ++j) {
    GPIPE_CHECK(sizes[j] > 0, "balance: cell ", j, " has ", sizes[j],
                " layers (every cell needs at least one)");
    p.bounds.push_back(p.bounds.back() + sizes[j]);
  }
  GPIPE_CHECK(p.bounds.back() == static_cast<int64_t>(costs.size()), "balance: cell sizes sum to ",
              p.bounds.back(), " but the model has ", costs.size(), " layers");
  for (size_t j = 0; j < sizes.size(); ++j) {
    double c = 0;
    for (int64_t i = p.bounds[j]; i < p.bounds[j + 1]; ++i) c += costs[i];
    p.cell_costs.push_back(c);
  }
  return p;
}

std::vector<int64_t> parse_balance(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    GPIPE_CHECK(used == item.size() && !item.empty(), "balance '", text,
                "': expected comma-separated layer counts like 4,4,3,3");
    out.push_back(v);
  }
  GPIPE_CHECK(!out.empty(), "balance '", text,
              "': expected comma-separated layer counts like 4,4,3,3");
  return out;
}

}  // namespace gpipe
