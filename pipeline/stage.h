// Stage: one cell of the pipeline, a contiguous run of layers on one device.
//
// Autograd stays inside a stage (Note [Stage graphs]): each micro-batch's
// forward starts from fresh leaves made from the bundle received from the
// previous stage, and its backward takes the gradient arriving from the next
// stage and returns the leaves' gradients. No graph spans two stages, so the
// engine needs no cross-thread locking.
#pragma once

#include <map>
#include <memory>

#include "layers/loss.h"
#include "runtime/channel.h"
#include "runtime/trace.h"

namespace gpipe {

struct StepContext {
  uint64_t seed = 0;
  int64_t step = 0;
  int micro_batches = 1;
  int micro_batch_offset = 0;  // replica r's micro-batch m is the job's r * M + m (dropout keys)
  double loss_scale = 1.0;  // 1 / (terms in the whole mini-batch): Note [Micro-batch weighting]
  bool check_finite = true;
};

class Stage {
 public:
  Stage(int index, LayerList layers, int64_t first_layer, Device device, std::shared_ptr<Loss> loss);

  int index() const { return index_; }
  Device device() const { return device_; }
  const LayerList& layers() const { return layers_; }
  bool is_last() const { return loss_ != nullptr; }

  // Runs micro-batch m's forward; returns the message for the next stage
  // (empty for the last stage, which computes the scaled loss instead).
  Message forward(int m, const Message& in, const Bundle& targets, bool remat, const StepContext& ctx,
                  Tracer* tracer);
  // Runs micro-batch m's backward (recomputing first if its forward was
  // rematerialised); returns the gradients for the previous stage.
  Message backward(int m, const Message& grads, const StepContext& ctx, Tracer* tracer);
  // Scaled loss of micro-batch m (last stage only), valid from its forward
  // until the next clear().
  double loss(int m) const;
  void clear();  // drops every micro-batch's saved state (after a failure)
  size_t live_micro_batches() const { return saved_.size(); }

 private:
  Bundle run(int m, const Bundle& x, const Bundle& targets, const StepContext& ctx);

  struct Saved {
    Bundle leaves;                    // the stage's inputs as autograd leaves
    std::vector<bool> input_requires; // which of them the previous stage wants gradients for
    Bundle outputs;                   // empty when rematerialised
    Bundle targets;                   // last stage, for recomputation
    bool remat = false;
  };

  int index_;
  LayerList layers_;
  int64_t first_layer_;
  Device device_;
  std::shared_ptr<Loss> loss_;
  std::map<int, Saved> saved_;
  std::map<int, double> losses_;
};

}  // namespace gpipe
