#include "pipeline/partition.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>

#include "core/rng.h"

using namespace gpipe;
using Catch::Contains;

namespace {
// Every contiguous partition into k non-empty cells: the smallest bottleneck.
double brute_force_bottleneck(const std::vector<double>& c, int k) {
  const int n = static_cast<int>(c.size());
  double best = 1e300;
  std::vector<int> cuts;
  std::function<void(int, int)> rec = [&](int start, int left) {
    if (left == 1) {
      double worst = 0, acc = 0;
      int prev = 0;
      std::vector<int> b = cuts;
      b.push_back(n);
      for (int e : b) {
        acc = 0;
        for (int i = prev; i < e; ++i) acc += c[i];
        worst = std::max(worst, acc);
        prev = e;
      }
      best = std::min(best, worst);
      return;
    }
    for (int e = start + 1; e <= n - (left - 1); ++e) {
      cuts.push_back(e);
      rec(e, left - 1);
      cuts.pop_back();
    }
  };
  rec(0, k);
  return best;
}
}  // namespace

TEST_CASE("partition: exact min-max equals brute force on random costs") {
  for (uint64_t seed = 0; seed < 60; ++seed) {
    const int n = 3 + static_cast<int>(seed % 9);
    std::vector<float> u(n);
    philox_uniform(seed, 0, u.data(), n);
    std::vector<double> costs(u.begin(), u.end());
    for (int k = 1; k <= std::min(n, 5); ++k) {
      Partition p = balanced_partition(costs, k);
      REQUIRE(p.cells() == k);
      CHECK(p.bounds.front() == 0);
      CHECK(p.bounds.back() == n);
      for (int j = 0; j < k; ++j) CHECK(p.end(j) > p.begin(j));
      CHECK(p.bottleneck() == Approx(brute_force_bottleneck(costs, k)).epsilon(1e-12));
    }
  }
}

TEST_CASE("partition: ties go to the smallest variance") {
  // Bottleneck 10 is forced by the big layer; the rest should spread evenly.
  Partition p = balanced_partition({10, 1, 1, 1, 1, 1, 1}, 3);
  CHECK(p.bottleneck() == 10);
  CHECK(p.cell_costs == std::vector<double>{10, 3, 3});
  Partition q = balanced_partition({1, 1, 1, 1, 1, 1, 1, 1}, 4);
  CHECK(q.cell_costs == std::vector<double>{2, 2, 2, 2});
}

TEST_CASE("partition: explicit balance and bad arguments") {
  Partition p = explicit_partition({2, 1, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(p.bounds == std::vector<int64_t>{0, 2, 3, 6});
  CHECK(p.cell_costs == std::vector<double>{3, 3, 15});
  CHECK(parse_balance("4,4,3,3") == std::vector<int64_t>{4, 4, 3, 3});
  CHECK_THROWS_WITH(balanced_partition({1, 2}, 3),
                    Contains("K = 3 cells need at least 3 layers, but the model has 2"));
  CHECK_THROWS_WITH(balanced_partition({1, 2}, 0), Contains("must be >= 1"));
  CHECK_THROWS_WITH(balanced_partition({1, -2}, 1), Contains("layer 1 has cost -2"));
  CHECK_THROWS_WITH(explicit_partition({2, 2}, {1, 1, 1}),
                    Contains("cell sizes sum to 4 but the model has 3 layers"));
  CHECK_THROWS_WITH(explicit_partition({2, 0, 1}, {1, 1, 1}), Contains("cell 1 has 0 layers"));
  CHECK_THROWS_WITH(parse_balance("4,x"), Contains("expected comma-separated layer counts"));
}
