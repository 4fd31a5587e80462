// ResNet-50/101/152 (He, Zhang, Ren, Sun, "Deep Residual Learning for Image
// Recognition", CVPR 2016, arXiv:1512.03385), the bottleneck variant with the
// stride on the 3x3 convolution (as torchvision's resnet50/101/152 and the
// GPipe paper's ResNet-101 runs), as a flat LayerList:
//
//   stem                 conv 7x7/2 (in -> W) -> BN -> ReLU -> max-pool 3x3/2 pad 1
//                        (small_input: conv 3x3/1 pad 1 -> BN -> ReLU, no pool: 32x32 inputs)
//   group g, block b     bottleneck(in -> planes -> 4 planes), planes = W 2^g,
//                        stride 2 in the first block of groups 1..3
//   head                 global average pool -> Linear(32 W -> classes)
//
// followed by CrossEntropyLoss on labels [N] (int32/int64). Blocks per group:
// 50: 3 4 6 3; 101: 3 4 23 3; 152: 3 8 36 3. A bottleneck is conv 1x1 -> BN ->
// ReLU -> conv 3x3 (stride) -> BN -> ReLU -> conv 1x1 -> BN, plus the shortcut
// (the input, or conv 1x1 with the stride -> BN where the shape changes),
// then ReLU. Convs have no bias; He-normal init.
//
// Each block is one layer ("group2_block5"), its residual inside it; or,
// with split_blocks, three ("group2_block5_a", "_b", "_c"), the shortcut a
// skip stashed by "_a" and popped by "_c" (namespace "group2_block5",
// layers/skip.h), so a pipeline may cut inside a block (torchgpipe's
// benchmark model does the same). Both forms compute the same function with
// the same parameters (the names differ).
//
// ResNet-101 at 1000 classes has 44,549,160 parameters (torchvision's count);
// resnet_parameter_count gives it for any config.
#pragma once

#include <cstdint>

#include "layers/loss.h"

namespace gpipe::models {

struct ResNetConfig {
  int64_t depth = 101;  // 50, 101 or 152
  int64_t width = 64;   // W: the stem's channels; group g's planes are W 2^g
  int64_t in_channels = 3;
  int64_t num_classes = 10;
  bool small_input = false;   // 3x3 stride-1 stem without pooling (32x32 images)
  bool split_blocks = false;  // three layers per block, the shortcut a skip
  // Each block's last BatchNorm starts with gamma = 0, so every block starts
  // as its shortcut (Goyal et al. 2017, "Accurate, Large Minibatch SGD";
  // torchvision's zero_init_residual): deep ResNets then train from the
  // first step without their activations growing block by block.
  bool zero_init_residual = true;
  uint64_t seed = 0;
};

int64_t resnet_parameter_count(const ResNetConfig& c);
int64_t resnet_layer_count(const ResNetConfig& c);  // 2 + blocks (x 3 with split_blocks)
// Throws gpipe::Error for a depth other than 50/101/152 or sizes < 1.
Model resnet(const ResNetConfig& c);

}  // namespace gpipe::models
