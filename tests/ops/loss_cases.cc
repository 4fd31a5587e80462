// Op-table cases: cross_entropy plain, with ignored rows, with label
// smoothing (and a non-default ignore_index), and with [B, T, C] logits;
// linear_cross_entropy (fused in its float32 run, in chunks of 5 rows).
#include <catch2/catch.hpp>
#include <cmath>

#include "ops/linalg.h"
#include "ops/loss.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

using In = std::vector<Tensor>;

// Naive PyTorch-style mean cross-entropy with label smoothing.
double reference(const Tensor& logits, const Tensor& targets, const ops::CrossEntropyOptions& opt) {
  const auto x = logits.to_vector<double>();
  const auto t = targets.to_vector<int64_t>();
  const int64_t c = logits.size(-1);
  double total = 0;
  int64_t count = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == opt.ignore_index) continue;
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += std::exp(x[i * c + j]);
    double smooth = 0;
    for (int64_t j = 0; j < c; ++j) smooth += -(x[i * c + j] - std::log(sum)) / c;
    const double nll = -(x[i * c + t[i]] - std::log(sum));
    total += (1 - opt.label_smoothing) * nll + opt.label_smoothing * smooth;
    ++count;
  }
  return count ? total / count : 0.0;
}

OpCase loss_case(std::string name, Shape logits_shape, Tensor targets, ops::CrossEntropyOptions opt,
                 uint64_t seed) {
  return OpCase{
      .name = std::move(name),
      .covers = {"cross_entropy_forward", "cross_entropy_backward"},
      .make_inputs =
          [=] {
            return In{rand64(logits_shape, seed, -2.0, 2.0), targets};
          },
      .fn = [opt](const In& in) { return In{ops::cross_entropy(in[0], in[1], opt)}; },
      .check_forward =
          [opt](const In& in, const In& out) {
            REQUIRE(out[0].rank() == 0);
            CHECK(std::abs(out[0].item() - reference(in[0], in[1], opt)) < 1e-12);
          },
      .grad_inputs = {0},
  };
}

GPIPE_OP_CASES({
    loss_case("cross_entropy/plain", Shape{4, 5},
              Tensor::from_vector<int64_t>({1, 0, 4, 2}, Shape{4}), {}, 41),
    loss_case("cross_entropy/ignore_index", Shape{4, 5},
              Tensor::from_vector<int64_t>({1, -100, 4, -100}, Shape{4}), {}, 42),
    loss_case("cross_entropy/label_smoothing", Shape{5, 4},
              Tensor::from_vector<int64_t>({3, 0, 2, 1, 2}, Shape{5}),
              {.ignore_index = 2, .label_smoothing = 0.2}, 43),
    loss_case("cross_entropy/rank3_int32_targets", Shape{2, 3, 4},
              Tensor::from_vector<int32_t>({0, 3, 1, 2, -100, 3}, Shape{2, 3}),
              {.label_smoothing = 0.1}, 44),
    OpCase{
        .name = "linear_cross_entropy/chunks_ignore_smoothing",
        .covers = {"linear_cross_entropy_fused"},
        // 12 rows x 7 classes of logits: more than the saved gradients (12 x 3
        // + 7 x 3), so the float32 run takes the fused kernel, 5 rows at a time.
        .make_inputs =
            [] {
              return In{rand64(Shape{12, 3}, 45, -1.5, 1.5), rand64(Shape{7, 3}, 46),
                        Tensor::from_vector<int64_t>({0, 6, -100, 3, 2, 5, 1, -100, 4, 4, 0, 6},
                                                     Shape{12})};
            },
        .fn =
            [](const In& in) {
              return In{
                  ops::linear_cross_entropy(in[0], in[1], in[2], {.label_smoothing = 0.1}, 5)};
            },
        .check_forward =
            [](const In& in, const In& out) {
              REQUIRE(out[0].rank() == 0);
              const double want =
                  reference(ops::linear(in[0], in[1]), in[2], {.label_smoothing = 0.1});
              CHECK(std::abs(out[0].item() - want) < 1e-12);
            },
        .grad_inputs = {0, 1},
    },
});

}  // namespace
}  // namespace gpipe::testing
