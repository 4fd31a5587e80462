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
