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
#include <optional>

#include "core/autograd.h"
#include "core/precision.h"
#include "layers/decode.h"
#include "layers/loss.h"
#include "layers/skip.h"
#include "runtime/mailbox.h"
#include "runtime/trace.h"

namespace gpipe {

struct StepContext {
  uint64_t seed = 0;
  int64_t step = 0;
  int micro_batch_offset = 0;  // replica r's micro-batch m is the job's r * M + m (dropout keys)
  double loss_scale = 1.0;     // 1 / (terms in the whole mini-batch): Note [Micro-batch weighting]
  DecodeSession* decode = nullptr;  // incremental decoding state (layers/decode.h), prediction only
  Precision precision = Precision::kFloat32;  // the layers' (Note [Mixed precision])
};

// Messages to or from the cells a skip connects this one with directly
// (Note [Skips]), by peer cell.
using SkipMessages = std::map<int, Message>;

// What a stage takes or gives at one end: the message of its neighbour
// (activations from the previous cell, or gradients from the next) and those
// of the cells its direct skips connect it with.
struct StageMessage {
  Message main;
  SkipMessages skips;
};

class Stage {
 public:
  Stage(int index, LayerList layers, int64_t first_layer, Device device, std::shared_ptr<Loss> loss,
        SkipRoutes routes = {});

  int index() const { return index_; }
  Device device() const { return device_; }
  const LayerList& layers() const { return layers_; }
  bool is_last() const { return loss_ != nullptr; }
  const SkipRoutes& routes() const { return routes_; }

  // F: micro-batch m's forward from `in`; keeps the graph when keep_graph
  // (otherwise only the inputs stay, for R). Returns the message for the
  // next stage; the last stage keeps its outputs instead (for L, or for
  // take_outputs in a forward-only program).
  StageMessage forward(int m, const StageMessage& in, bool keep_graph, const StepContext& ctx,
                       Tracer* tracer);
  // L (last stage): the loss of micro-batch m's outputs against `targets`,
  // times ctx.loss_scale; returns its value, also kept (loss_value).
  double loss(int m, const Bundle& targets, const StepContext& ctx);
  // R: re-runs micro-batch m's forward (and loss) with its graph, under the
  // same random keys and inside RecomputationScope.
  void recompute(int m, const StepContext& ctx, Tracer* tracer);
  // B: micro-batch m's backward from the gradients of its outputs (the last
  // stage starts from its loss); returns the gradients for the previous stage.
  StageMessage backward(int m, const StageMessage& grads, const StepContext& ctx, Tracer* tracer);
  // I: the input-gradient half of B (Note [Split backward]): returns the
  // gradients for the previous stage and keeps the weight-gradient half.
  StageMessage backward_input(int m, const StageMessage& grads, const StepContext& ctx,
                              Tracer* tracer);
  // W: the weight-gradient half, after I; accumulates into the parameters'
  // grad() and frees micro-batch m's saved state.
  void backward_weight(int m, const StepContext& ctx, Tracer* tracer);
  // The last stage's outputs of micro-batch m (forward-only programs); once.
  Bundle take_outputs(int m);
  double loss_value(int m) const;  // what L returned, until clear()
  void clear();  // drops every micro-batch's saved state (end of a step, or after a failure)
  size_t live_micro_batches() const { return saved_.size(); }

 private:
  // Runs the layers on the bundle part of `x` with the skips it receives;
  // returns the activation message's tensors and fills the direct skips'.
  // With `head` (the last stage, whose loss takes_head()), a last layer that
  // has a forward_head leaves its LinearHead there and the returned bundle
  // empty (Note [Fused output loss] in ops/loss.cc).
  Bundle run(int m, const Bundle& x, const std::map<int, Bundle>& skips_in, const StepContext& ctx,
             std::map<int, Bundle>* skips_out, std::optional<LinearHead>* head);
  struct Saved;
  // The loss of s's outputs (or head) against `targets`, times ctx.loss_scale.
  Tensor scaled_loss(const Saved& s, const Bundle& targets, const StepContext& ctx);
  // Where run should leave the last layer's head: the last stage's, when its loss takes one.
  std::optional<LinearHead>* head_slot(Saved& s) const;

  struct Saved {
    Bundle leaves;                      // the stage's inputs as autograd leaves
    std::vector<bool> input_requires;   // which of them the previous stage wants gradients for
    std::map<int, Bundle> skip_leaves;  // direct skips received, by producer cell
    std::map<int, std::vector<bool>> skip_requires;
    Bundle outputs;                      // with their graph when `graph`
    std::optional<LinearHead> head;      // last stage: in place of outputs, for a fused loss
    std::map<int, Bundle> skip_outputs;  // direct skips sent, by consumer cell
    bool graph = false;
    Bundle targets;                          // last stage, for recomputation
    Tensor root;                             // last stage: the scaled loss, with its graph
    std::optional<WeightGradients> weights;  // after I, until W
  };
  // The roots and their gradients of micro-batch m's backward; drops the
  // outputs and root (the graph lives on through the roots).
  void take_roots(Saved& s, int m, const StageMessage& grads, std::vector<Tensor>& roots,
                  std::vector<Tensor>& root_grads);
  StageMessage input_gradients(const Saved& s) const;
  Saved& saved(int m, const char* action);

  int index_;
  LayerList layers_;
  int64_t first_layer_;
  Device device_;
  std::shared_ptr<Loss> loss_;
  SkipRoutes routes_;
  bool differentiable_ = false;  // has parameters (Note [Boundary gradients])
  std::map<int, Saved> saved_;
  std::map<int, double> losses_;
};

}  // namespace gpipe
