#include "tests/ops/op_table.h"

#include <algorithm>
#include <cmath>

#include "core/rng.h"

namespace gpipe::testing {

std::vector<OpCase>& op_cases() {
  static std::vector<OpCase>* cases = new std::vector<OpCase>;
  return *cases;
}

OpCaseRegistrar::OpCaseRegistrar(std::vector<OpCase> cases) {
  for (auto& c : cases) op_cases().push_back(std::move(c));
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  GPIPE_CHECK(a.shape() == b.shape(), "max_abs_diff: shapes ", a.shape(), " and ", b.shape(),
              " differ");
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

Tensor rand64(const Shape& shape, uint64_t seed, double lo, double hi) {
  return Tensor::uniform(shape, mix_key(seed, 0x5eed), lo, hi, DType::kFloat64);
}

}  // namespace gpipe::testing
