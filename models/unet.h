// U-Net(B, C): an encoder-decoder with long skip connections, written as a
// flat LayerList whose skips are stashes and pops (layers/skip.h), so a
// pipeline can cut it anywhere and each skip goes straight from its encoder
// level's cell to its decoder level's cell.
//
//   encoder_i, i = 0..B-1   x -> convs -> stash "skip" (namespace level_i) -> max-pool 2x2
//   bottleneck              convs
//   decoder_i, i = B-1..0   x -> nearest 2x upsample -> concat [x, pop "skip"] -> convs
//   segment                 1x1 conv -> logits, channels last [N, H, W, classes]
//
// followed by CrossEntropyLoss on per-pixel labels [N, H, W] (int32/int64).
// "convs" is a stack of `convs_per_block` units (3x3 conv without bias, pad
// 1 -> BatchNorm -> ReLU), in -> mid -> ... -> mid -> out channels:
//
//   block        in              mid = out (bottleneck: mid C 2^B, out C 2^(B-1))
//   encoder_i    in_ch | C 2^(i-1)   C 2^i
//   bottleneck   C 2^(B-1)           C 2^B, C 2^(B-1)
//   decoder_i    C 2^(i+1)           C 2^(i-1)  (decoder_0: C / 2)
//   segment      C / 2 -> classes, 1x1, no bias
//
// The layout (depth B, units per block, channel doubling per level, skips
// concatenated after upsampling, 1x1 segmentation head) is torchgpipe's
// simplified U-Net benchmark model (kakaobrain/torchgpipe,
// benchmarks/models/unet, v0.0.7: unet(depth=5, num_convs=5,
// base_channels=64)). Differences, for the ops this framework has: BatchNorm
// and ReLU instead of InstanceNorm and LeakyReLU(0.01), no Dropout2d, and
// inputs whose height and width are multiples of 2^B (no padding of the
// upsampled map). parameter count: unet_parameter_count.
//
// Parameter names: "encoder_0.conv1.weight", "encoder_0.bn1.gamma",
// "bottleneck.conv3.weight", "decoder_2.bn5.beta", "segment.conv.weight".
#pragma once

#include <cstdint>

#include "layers/loss.h"

namespace gpipe::models {

struct UNetConfig {
  int64_t depth = 5;           // B: encoder levels (>= 1)
  int64_t base_channels = 64;  // C: channels of level 0 (even, >= 2)
  int64_t convs_per_block = 5;
  int64_t in_channels = 1;
  int64_t num_classes = 2;  // per-pixel classes (2: background / foreground)
  uint64_t seed = 0;        // He-normal convs
};

// Exact parameter count from the config alone, without allocating.
int64_t unet_parameter_count(const UNetConfig& c);
// Layers in unet(c)'s list: 2B + 2.
int64_t unet_layer_count(const UNetConfig& c);
// Throws gpipe::Error for a config outside the ranges above.
Model unet(const UNetConfig& c);

}  // namespace gpipe::models
