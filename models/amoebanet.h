// AmoebaNet-D(N, F): the convolutional network of the GPipe paper, written as
// one flat LayerList so a pipeline can cut it between any two cells:
//
//   Stem                 (x [B, in_channels, H, W])  -> (s, s)
//   Cell x (3N + 4)      (prev, prev_prev)           -> (cell_out, prev)
//   Classifier           (prev, prev_prev)           -> (logits [B, num_classes])
//
// followed by CrossEntropyLoss on labels [B] (int32/int64). The second element
// a cell returns is its own input `prev`, which becomes the next cell's
// prev_prev. The cells are, in order (C = channels per cell state):
//   cell_0, cell_1          stem reduction cells     C = 2c, 4c   (c = F / 4;
//                           none with small_input, where cell_0 is the first normal cell)
//   cell_2 .. cell_{N+1}    N normal cells           C = 4c
//   cell_{N+2}              reduction cell           C = 8c
//   next N                  normal cells             C = 8c
//   cell_{2N+3}             reduction cell           C = 16c
//   last N                  normal cells             C = 16c
// A normal cell outputs 4C channels, a reduction cell 3C channels at half the
// height and width. The classifier is global average pooling, then
// Linear(16c * 4 -> num_classes) (Linear(16c * 3 -> ...) when N = 0).
//
// Genotype (AmoebaNet-D). Real, Aggarwal, Huang, Le, "Regularized Evolution
// for Image Classifier Architecture Search", AAAI 2019 (arXiv:1802.01548), as
// used by Huang et al., "GPipe" (arXiv:1811.06965); the cell wiring and the
// building blocks below follow torchgpipe's reimplementation
// (kakaobrain/torchgpipe, benchmarks/models/amoebanet, v0.0.7), and the
// normal-cell concat [0, 3, 4, 6] follows TensorFlow's reference
// implementation (tensorflow/tpu models/official/amoeba_net, which the GPipe
// parameter counts reproduce; the paper says [4, 5, 6]). See
// /work/shared/BENCHMARKS.md, "W5 AmoebaNet-D".
//
//   state0 = RCB(C_p -> C, 1x1)(prev)
//   state1 = FactorizedReduce(C_pp -> C)(prev_prev)  if the previous cell reduced,
//            RCB(C_pp -> C, 1x1)(prev_prev)          else if C_pp != C,
//            prev_prev                               otherwise
//   node k = op_a(state[i_a]) + op_b(state[i_b]), k = 2..6; in a reduction
//            cell an op reading state 0 or 1 has stride 2, others stride 1.
//
//   node | normal cell                        | reduction cell
//   -----+------------------------------------+---------------------------------------------
//    2   | (1, conv_1x1)    + (1, max_pool_3x3) | (0, max_pool_2x2)   + (0, max_pool_3x3)
//    3   | (1, none)        + (0, conv_1x7_7x1) | (2, none)           + (1, conv_3x3)
//    4   | (0, conv_1x1)    + (0, conv_1x7_7x1) | (2, conv_1x7_7x1)   + (2, max_pool_3x3)
//    5   | (2, max_pool_3x3) + (2, none)        | (3, none)           + (1, max_pool_2x2)
//    6   | (1, avg_pool_3x3) + (5, conv_1x1)    | (2, avg_pool_3x3)   + (3, conv_1x1)
//   out  | concat states [0, 3, 4, 6] (4C)      | concat states [4, 5, 6] (3C)
//
// Building blocks (every conv has no bias; RCB = ReLU -> Conv2d -> BatchNorm):
//   conv_1x1(C, s)      RCB(C, C, 1x1, stride s)
//   conv_3x3(C, s)      RCB(C, C/4, 1x1) -> RCB(C/4, C/4, 3x3, s, pad 1) -> RCB(C/4, C, 1x1)
//   conv_1x7_7x1(C, s)  RCB(C, C/4, 1x1) -> RCB(C/4, C/4, 1x7, (1, s), pad (0, 3))
//                       -> RCB(C/4, C/4, 7x1, (s, 1), pad (3, 0)) -> RCB(C/4, C, 1x1)
//   avg_pool_3x3(s)     AvgPool 3x3, stride s, pad 1, count_include_pad = false
//   max_pool_3x3(s)     MaxPool 3x3, stride s, pad 1 (torchgpipe_maxpool_quirk: the
//                       avg_pool_3x3 above instead, as torchgpipe's code does)
//   max_pool_2x2(s)     MaxPool 2x2, stride s, no padding
//   none(s)             identity if s = 1, else FactorizedReduce(C, C)
//   FactorizedReduce    ReLU, then concat[conv1x1 s2 (C_in -> C/2)(x),
//                       conv1x1 s2 (C_in -> C/2)(shift(x))], then BatchNorm(C);
//                       shift drops the first row and column and zero-pads one
//                       row and column at the bottom/right.
// Stem: ReLU (on the raw input) -> Conv2d(in_channels -> c, 3x3, stride 2,
// pad 1) -> BatchNorm (small_input: F channels, stride 1; see the config).
//
// Parameter names: "stem.conv.weight", "cell_3.preprocess0.conv1.weight",
// "cell_3.node_2.op_a.conv1.weight", "cell_3.node_3.op_b.bn4.gamma",
// "cell_1.preprocess1.conv2.weight" (FactorizedReduce: conv1, conv2, bn),
// "classifier.fc.weight". Numbered convs and BatchNorms inside an op count its
// RCBs from 1. Every BatchNorm is a registered sublayer, so Layer::finish_step()
// on each layer of the list folds all running statistics once per step.
//
// Input size (the paper's layout; small_input: H and W multiples of 4, see
// AmoebaNetConfig): the four reduction cells need even sizes, so ceil(H/2) and
// ceil(W/2) must be multiples of 16 (32x32, 64x64, 224x224, ...). The stem
// throws gpipe::Error naming itself for other sizes: pad 28x28 Fashion-MNIST
// images to 32x32. Every layer throws gpipe::Error naming itself for a bundle
// of the wrong size, rank, channel count or spatial size. float32 or float64.
//
// N = 2, F = 32, 3 input channels, 10 classes (W5): 679,578 parameters.
#pragma once

#include <cstdint>

#include "layers/loss.h"

namespace gpipe::models {

enum class AmoebaNetGenotype { kD, kB };

struct AmoebaNetConfig {
  AmoebaNetGenotype genotype = AmoebaNetGenotype::kD;  // what amoebanet() builds
  int64_t num_normal_cells = 2;  // N: normal cells after each of the 3 reductions (>= 0)
  int64_t filters = 32;          // F: the stem has F / 4 channels (F with small_input; >= 8)
  int64_t in_channels = 3;       // 3 for RGB (W5), 1 for Fashion-MNIST
  int64_t num_classes = 10;
  // false (default): the paper's ImageNet layout above. true: the layout for
  // 28-32 px images (the CIFAR models of NASNet and AmoebaNet): the stem is
  // Conv2d(in_channels -> F, 3x3, stride 1, pad 1) -> BatchNorm and there are
  // no stem reduction cells, so the normal cells run at the input's full,
  // half and quarter size (32, 16, 8 for 32x32 images) with C = F, 2F, 4F
  // channels, instead of at 4, 2 and 1. 3N + 4 layers; H and W must be
  // multiples of 4 (28x28 and 32x32 fit).
  bool small_input = false;
  // true: max_pool_3x3 is AvgPool2d(3, s, 1, count_include_pad = false), as in
  // torchgpipe's benchmark code; false (default): real max pooling.
  bool torchgpipe_maxpool_quirk = false;
  uint64_t seed = 0;  // weights: He-normal convs, uniform Linear
};

// Exact parameter count from the config alone, without allocating.
int64_t amoebanet_parameter_count(const AmoebaNetConfig& c);

// Layers in amoebanet_d(c)'s flat list, 3N + 6 (3N + 4 with small_input): the
// most cells K can have.
int64_t amoebanet_layer_count(const AmoebaNetConfig& c);

// Stem, 3N + 4 cells (3N + 2 with small_input) and the classifier (see
// above), with CrossEntropyLoss.
// Throws gpipe::Error for N < 0, F < 8, in_channels < 1 or num_classes < 1.
Model amoebanet_d(const AmoebaNetConfig& c);
// The same with AmoebaNet-B's genotype (above); amoebanet() builds c.genotype.
Model amoebanet_b(const AmoebaNetConfig& c);
Model amoebanet(const AmoebaNetConfig& c);

}  // namespace gpipe::models
