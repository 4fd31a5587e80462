// Op-table cases: the fused attention op against its composed form
// (ops::attention_composed: reshape, permute, matmul, masked_fill, softmax),
// forward values, and its gradients against finite differences: causal
// self-attention, cross-attention with padded keys (one example fully
// padded), causal self-attention with padding that is and is not a suffix, and one head; and
// with dropout on the probabilities, against the composed form with ops::dropout there (the
// same mask). On CUDA the fused op runs the flash kernels (tests/cuda/attention_test.cc has
// their larger shapes).
#include <catch2/catch.hpp>

#include "ops/attention.h"
#include "ops/dropout.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

using In = std::vector<Tensor>;

void check_against_composed(const In& in, const In& out, int64_t heads, bool causal) {
  const Tensor pad = in.size() > 3 ? in[3] : Tensor();
  const Tensor want = ops::attention_composed(in[0], in[1], in[2], heads, causal, pad);
  REQUIRE(out[0].shape() == want.shape());
  CHECK(max_abs_diff(out[0], want) < 1e-12);
}

// The composed form with ops::dropout(P, p, true, salt) on its probabilities.
void check_dropout_against_composed(const In& in, const In& out, int64_t heads, bool causal,
                                    double p, uint64_t salt) {
  const Tensor pad = in.size() > 3 ? in[3] : Tensor();
  const Tensor want = ops::attention_composed(
      in[0], in[1], in[2], heads, causal, pad,
      [&](const Tensor& probs) { return ops::dropout(probs, p, true, salt); });
  REQUIRE(out[0].shape() == want.shape());
  CHECK(max_abs_diff(out[0], want) < 1e-12);
  // The mask drops something: without it the result differs.
  CHECK(max_abs_diff(out[0], ops::attention_composed(in[0], in[1], in[2], heads, causal, pad)) >
        1e-3);
}

Tensor padding() {  // [2, 5]: example 0 pads its last two keys, example 1 all of them
  return Tensor::from_vector<double>({0, 0, 0, 1, 1, 1, 1, 1, 1, 1}, Shape{2, 5});
}

GPIPE_OP_CASES({
    OpCase{
        .name = "attention/causal_self",
        .covers = {"attention_forward", "attention_backward", "flash_attention_takes",
                   "flash_attention_forward", "flash_attention_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 4, 6}, 71), rand64(Shape{2, 4, 6}, 72),
                        rand64(Shape{2, 4, 6}, 73)};
            },
        .fn = [](const In& in) { return In{ops::attention(in[0], in[1], in[2], 2, true)}; },
        .check_forward = [](const In& in,
                            const In& out) { check_against_composed(in, out, 2, true); },
    },
    OpCase{
        .name = "attention/cross_padded_keys",
        .covers = {"attention_forward", "attention_backward", "flash_attention_takes",
                   "flash_attention_forward", "flash_attention_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 6}, 74), rand64(Shape{2, 5, 6}, 75),
                        rand64(Shape{2, 5, 6}, 76), padding()};
            },
        .fn = [](const In& in) { return In{ops::attention(in[0], in[1], in[2], 3, false, in[3])}; },
        .check_forward = [](const In& in,
                            const In& out) { check_against_composed(in, out, 3, false); },
        .grad_inputs = {0, 1, 2},
    },
    // Causal self-attention over padded keys: example 0 pads keys 1 and 4 (not
    // a suffix: the masked form), example 1 its last two (a suffix: the CPU's
    // prefix form, min(i + 1, 3) keys per row).
    OpCase{
        .name = "attention/causal_padded_holes_and_suffix",
        .covers = {"attention_forward", "attention_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 5, 6}, 77), rand64(Shape{2, 5, 6}, 78),
                        rand64(Shape{2, 5, 6}, 79),
                        Tensor::from_vector<double>({0, 1, 0, 0, 1, 0, 0, 0, 1, 1}, Shape{2, 5})};
            },
        .fn = [](const In& in) { return In{ops::attention(in[0], in[1], in[2], 2, true, in[3])}; },
        .check_forward = [](const In& in,
                            const In& out) { check_against_composed(in, out, 2, true); },
        .grad_inputs = {0, 1, 2},
    },
    // The composed form itself (what devices without a fused kernel run, and
    // CUDA for heads wider than its flash kernel's), with the fully padded example: in float16 a
    // masked score of -1e9 became -inf and that example's row NaN (Note [Masked scores]).
    OpCase{
        .name = "attention/composed_cross_padded_keys",
        .covers = {"masked_fill_apply", "softmax_forward", "softmax_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 6}, 80), rand64(Shape{2, 5, 6}, 81),
                        rand64(Shape{2, 5, 6}, 82), padding()};
            },
        .fn =
            [](const In& in) {
              return In{ops::attention_composed(in[0], in[1], in[2], 3, false, in[3])};
            },
        .check_forward =
            [](const In& in, const In& out) {
              // The fully padded example attends uniformly: the mean of its values.
              const Tensor want = ops::attention(in[0], in[1], in[2], 3, false, in[3]);
              CHECK(max_abs_diff(out[0], want) < 1e-12);
            },
        .grad_inputs = {0, 1, 2},
    },
    OpCase{
        .name = "attention/composed_causal",
        .covers = {"masked_fill_apply"},
        .make_inputs =
            [] {
              return In{rand64(Shape{1, 4, 4}, 83), rand64(Shape{1, 4, 4}, 84),
                        rand64(Shape{1, 4, 4}, 85)};
            },
        .fn =
            [](const In& in) { return In{ops::attention_composed(in[0], in[1], in[2], 2, true)}; },
        .check_forward =
            [](const In& in, const In& out) {
              CHECK(max_abs_diff(out[0], ops::attention(in[0], in[1], in[2], 2, true)) < 1e-12);
            },
    },
    OpCase{
        .name = "attention/one_head",
        .covers = {"attention_forward", "attention_backward", "flash_attention_takes",
                   "flash_attention_forward", "flash_attention_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{1, 3, 4}, 77), rand64(Shape{1, 2, 4}, 78),
                        rand64(Shape{1, 2, 4}, 79)};
            },
        .fn = [](const In& in) { return In{ops::attention(in[0], in[1], in[2], 1, false)}; },
        .check_forward = [](const In& in,
                            const In& out) { check_against_composed(in, out, 1, false); },
    },
    // Widths that are whole vectors (16 keys, heads of 16): the float32 run
    // takes the register tiles of Note [Small attention products] in
    // ops/cpu/attention.cc at the AVX2 and AVX-512 levels, all six products.
    OpCase{
        .name = "attention/vector_width_causal",
        .covers = {"attention_forward", "attention_backward", "flash_attention_takes",
                   "flash_attention_forward", "flash_attention_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 16, 32}, 86), rand64(Shape{2, 16, 32}, 87),
                        rand64(Shape{2, 16, 32}, 88)};
            },
        .fn = [](const In& in) { return In{ops::attention(in[0], in[1], in[2], 2, true)}; },
        .check_forward = [](const In& in,
                            const In& out) { check_against_composed(in, out, 2, true); },
    },
    // Causal self-attention over 20 tokens, heads of 16, example 1 padding
    // its last 6 keys: the float32 run's value products take the register
    // tiles with each tile's sum cut to the band of visible keys (Note
    // [Banded products] in ops/cpu/attention.cc), rows 16-19 as one short
    // tile, and its softmax rows of 1-20 keys end inside a vector.
    OpCase{
        .name = "attention/vector_width_causal_suffix_padded",
        .covers = {"attention_forward", "attention_backward", "flash_attention_takes",
                   "flash_attention_forward", "flash_attention_backward"},
        .make_inputs =
            [] {
              std::vector<double> pad(40, 0.0);
              for (int j = 34; j < 40; ++j) pad[j] = 1.0;
              return In{rand64(Shape{2, 20, 32}, 92), rand64(Shape{2, 20, 32}, 93),
                        rand64(Shape{2, 20, 32}, 94),
                        Tensor::from_vector<double>(pad, Shape{2, 20})};
            },
        .fn = [](const In& in) { return In{ops::attention(in[0], in[1], in[2], 2, true, in[3])}; },
        .check_forward = [](const In& in,
                            const In& out) { check_against_composed(in, out, 2, true); },
        .grad_inputs = {0, 1, 2},
    },
    // Five queries (fewer than a tile's rows) over 16 padded keys, heads of
    // 12: the score products take the tiles with a transpose whose depth is
    // not a multiple of 8, the value products (12 wide) the general GEMM.
    OpCase{
        .name = "attention/vector_width_keys_padded",
        .covers = {"attention_forward", "attention_backward", "flash_attention_takes",
                   "flash_attention_forward", "flash_attention_backward"},
        .make_inputs =
            [] {
              std::vector<double> pad(32, 0.0);  // example 1 pads its last five keys
              for (int j = 27; j < 32; ++j) pad[j] = 1.0;
              return In{rand64(Shape{2, 5, 24}, 89), rand64(Shape{2, 16, 24}, 90),
                        rand64(Shape{2, 16, 24}, 91),
                        Tensor::from_vector<double>(pad, Shape{2, 16})};
            },
        .fn = [](const In& in) { return In{ops::attention(in[0], in[1], in[2], 2, false, in[3])}; },
        .check_forward = [](const In& in,
                            const In& out) { check_against_composed(in, out, 2, false); },
        .grad_inputs = {0, 1, 2},
    },
    // Outputs wider than one column chunk (Note [Column chunks] in
    // ops/cpu/attention.cc), the last chunk narrower: at AVX2, 24 keys
    // (3 vectors: 2 + 1) and heads of 40 (5: 2 + 2 + 1), causal; at
    // AVX-512, one head of 80 (5 vectors: 4 + 1).
    OpCase{
        .name = "attention/column_chunks_causal",
        .covers = {"attention_forward", "attention_backward", "flash_attention_takes",
                   "flash_attention_forward", "flash_attention_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{1, 24, 80}, 95), rand64(Shape{1, 24, 80}, 96),
                        rand64(Shape{1, 24, 80}, 97)};
            },
        .fn = [](const In& in) { return In{ops::attention(in[0], in[1], in[2], 2, true)}; },
        .check_forward = [](const In& in,
                            const In& out) { check_against_composed(in, out, 2, true); },
    },
    OpCase{
        .name = "attention/column_chunks_one_head",
        .covers = {"attention_forward", "attention_backward", "flash_attention_takes",
                   "flash_attention_forward", "flash_attention_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{1, 20, 80}, 98), rand64(Shape{1, 16, 80}, 99),
                        rand64(Shape{1, 16, 80}, 100)};
            },
        .fn = [](const In& in) { return In{ops::attention(in[0], in[1], in[2], 1, false)}; },
        .check_forward = [](const In& in,
                            const In& out) { check_against_composed(in, out, 1, false); },
    },
    // Dropout on the probabilities (Note [Attention dropout] in ops/attention.cc):
    // cross-attention with a fully padded example (its uniform rows are dropped too),
    // causal self-attention with padding that is a suffix (the CPU's prefix form) and
    // holes (the masked form), and whole-vector widths (the register tiles).
    OpCase{
        .name = "attention/dropout_cross_padded_keys",
        .covers = {"attention_forward", "attention_backward", "flash_attention_takes",
                   "flash_attention_forward", "flash_attention_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 3, 6}, 101), rand64(Shape{2, 5, 6}, 102),
                        rand64(Shape{2, 5, 6}, 103), padding()};
            },
        .fn =
            [](const In& in) {
              return In{ops::attention(in[0], in[1], in[2], 3, false, in[3], {0.3, 7})};
            },
        .check_forward =
            [](const In& in, const In& out) {
              check_dropout_against_composed(in, out, 3, false, 0.3, 7);
            },
        .grad_inputs = {0, 1, 2},
    },
    OpCase{
        .name = "attention/dropout_causal_padded_holes_and_suffix",
        .covers = {"attention_forward", "attention_backward"},
        .make_inputs =
            [] {
              return In{rand64(Shape{2, 5, 6}, 104), rand64(Shape{2, 5, 6}, 105),
                        rand64(Shape{2, 5, 6}, 106),
                        Tensor::from_vector<double>({0, 1, 0, 0, 1, 0, 0, 0, 1, 1}, Shape{2, 5})};
            },
        .fn =
            [](const In& in) {
              return In{ops::attention(in[0], in[1], in[2], 2, true, in[3], {0.25, 3})};
            },
        .check_forward =
            [](const In& in, const In& out) {
              check_dropout_against_composed(in, out, 2, true, 0.25, 3);
            },
        .grad_inputs = {0, 1, 2},
    },
    OpCase{
        .name = "attention/dropout_vector_width_causal_suffix_padded",
        .covers = {"attention_forward", "attention_backward", "flash_attention_takes",
                   "flash_attention_forward", "flash_attention_backward"},
        .make_inputs =
            [] {
              std::vector<double> pad(40, 0.0);
              for (int j = 35; j < 40; ++j) pad[j] = 1.0;
              return In{rand64(Shape{2, 20, 32}, 107), rand64(Shape{2, 20, 32}, 108),
                        rand64(Shape{2, 20, 32}, 109),
                        Tensor::from_vector<double>(pad, Shape{2, 20})};
            },
        .fn =
            [](const In& in) {
              return In{ops::attention(in[0], in[1], in[2], 2, true, in[3], {0.5, 11})};
            },
        .check_forward =
            [](const In& in, const In& out) {
              check_dropout_against_composed(in, out, 2, true, 0.5, 11);
            },
        .grad_inputs = {0, 1, 2},
    },
});

}  // namespace
}  // namespace gpipe::testing
