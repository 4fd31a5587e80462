// Profile: each layer's costs measured on its device from one micro-batch
// (the cost model of the simulator and the planner): forward,
// input-gradient and weight-gradient seconds (the split backward, Note
// [Split backward]) and the activation bytes a micro-batch keeps.
#pragma once

#include <cstdint>
#include <vector>

#include "layers/layer.h"
#include "layers/loss.h"
#include "pipeline/simulate.h"

namespace gpipe {

struct LayerProfile {
  double forward_seconds = 0, backward_input_seconds = 0, backward_weight_seconds = 0;
  int64_t activation_bytes = 0;      // alive after the forward with its graph, outputs included
  int64_t output_bytes = 0;          // the outputs alone (what follows the layer receives)
  int64_t output_grad_bytes = 0;     // the floating outputs (the gradient that comes back)
  int64_t pending_bytes = 0;         // alive between I and W once the outputs are gone
  int64_t backward_extra_bytes = 0;  // peak during I and W above what was alive at I's start
  int64_t input_extra_bytes = 0;     // peak during I above what was alive at its start
  int64_t weight_extra_bytes = 0;    // peak during W above what was alive at its start
  int64_t parameter_bytes = 0;
  int64_t workspace_bytes = 0;  // peak scratch (GEMM packing, column buffers) of its passes
};

// Bytes of the defined tensors of `b` (only the floating ones if asked).
int64_t bundle_bytes(const Bundle& b, bool floating_only = false);

// Runs `sample` (one micro-batch's inputs) through the layers in turn,
// each `reps` times after one untimed run (best time kept; bytes from the
// last run; the timed runs accumulate into existing gradients); parameters'
// gradients and the layers' step statistics are left as they were found.
// With a `loss` that takes_head(), a last layer with a head is profiled as
// the pipeline's last cell runs it (Note [Fused output loss] in
// ops/loss.cc): its output is the head's hidden state, and the output
// projection is the loss's (profile_model_loss).
std::vector<LayerProfile> profile_layers(const LayerList& layers, const Bundle& sample,
                                         int reps = 2, const Loss* loss = nullptr);

// The loss on the last stage as one more "layer": what its graph keeps
// (activation_bytes) and its backward's transients; seconds of forward and
// of the backward split as the pipeline splits it (I, W), and what waits
// between the two (pending_bytes: a fused output loss's weight gradient).
// The best of `reps` runs after an untimed one; how the seconds are split
// between F and B: see profile_loss_of in pipeline/profile.cc.
LayerProfile profile_loss(Loss& loss, const Bundle& outputs, const Bundle& targets, int reps = 2);
// The same for a loss given the last layer's head (Loss::sum_head): the
// projection's time and what the loss keeps for backward are the loss's.
// The head's weight's gradient is dropped after.
LayerProfile profile_loss(Loss& loss, const LinearHead& head, const Bundle& targets, int reps = 2);

// model.loss's profile on the last cell as the pipeline computes it, from the
// model's inputs `sample` (the layers run without a graph): on the last
// layer's head where the loss takes one, else on the outputs. What the
// planner adds to the last cell beside profile_layers(..., model.loss).
LayerProfile profile_model_loss(const Model& model, const Bundle& sample, const Bundle& targets,
                                int reps = 2);

// The simulator's costs of the cell made of layers [begin, end): the sums
// of their profiles, a graph that keeps the cell's input (`input_bytes`,
// the previous layer's outputs or the sample's bytes for the first cell)
// besides its layers' activations, plus `extra` (the loss, last cell); the
// backward transient is the largest layer's. B = I + W.
StageCosts cell_costs(const std::vector<LayerProfile>& profile, int64_t begin, int64_t end,
                      int64_t input_bytes, const LayerProfile* extra = nullptr);

}  // namespace gpipe
