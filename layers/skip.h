// Skip connections between layers: a layer stashes a named tensor in its
// forward and a later layer pops it (Note [Skips] in docs/ARCHITECTURE.md).
//
//   class Down : public Layer {          // in the constructor: declare_stash("skip");
//     Bundle forward(const Bundle& in) override {
//       Tensor y = ...;
//       stash("skip", y);                // kept for the layer that pops it
//       return {ops::max_pool2d(y, ...)};
//     }
//   };
//   class Up : public Layer {            // declare_pop("skip");
//     Bundle forward(const Bundle& in) override {
//       return {ops::concat({upsample(in[0]), pop("skip")}, 1)};
//     }
//   };
//
// Names are scoped: a layer's names live in its skip namespace (set with
// Layer::set_skip_namespace, "" by default), so two blocks may both use
// "skip" in namespaces of their own. In a pipeline the tensor goes straight
// from the producing cell's device to the consuming cell's, and its gradient
// straight back; the cells between never see it. skip_edges checks a layer
// list's declarations: every stash popped exactly once by a later layer.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/bundle.h"
#include "core/tensor.h"

namespace gpipe {

class Layer;
using LayerPtr = std::shared_ptr<Layer>;
using LayerList = std::vector<LayerPtr>;

// A skip's full name: "<namespace>/<name>" ("/<name>" without a namespace).
std::string skip_full_name(const std::string& ns, const std::string& name);

// The tensors stashed and not yet popped while a layer list runs, by full name.
class SkipStore {
 public:
  // `layer` names who asks, for the errors.
  void stash(const std::string& name, Tensor t, const std::string& layer);
  Tensor pop(const std::string& name, const std::string& layer);
  bool empty() const { return held_.empty(); }
  const std::map<std::string, Tensor>& held() const { return held_; }
  // A copy whose tensors are fresh leaves (detached; float ones ask for a
  // gradient): what a profiler running one layer at a time carries between
  // layers.
  SkipStore detached() const;

 private:
  std::map<std::string, Tensor> held_;
};

// The specs of stashed tensors while output_spec / cost walk a layer list.
// A pop only reads (cost and output_spec may both ask).
class SkipSpecStore {
 public:
  void stash(const std::string& name, TensorSpec spec) { held_[name] = std::move(spec); }
  TensorSpec pop(const std::string& name, const std::string& layer) const;

 private:
  std::map<std::string, TensorSpec> held_;
};

// Makes `store` the one Layer::stash / pop use on this thread until the
// scope ends (scopes nest; the previous store comes back).
class SkipScope {
 public:
  explicit SkipScope(SkipStore* store);
  ~SkipScope();
  SkipScope(const SkipScope&) = delete;
  SkipScope& operator=(const SkipScope&) = delete;

 private:
  SkipStore* previous_;
};

class SkipSpecScope {
 public:
  explicit SkipSpecScope(SkipSpecStore* store);
  ~SkipSpecScope();
  SkipSpecScope(const SkipSpecScope&) = delete;
  SkipSpecScope& operator=(const SkipSpecScope&) = delete;

 private:
  SkipSpecStore* previous_;
};

SkipStore* current_skip_store();
SkipSpecStore* current_skip_spec_store();

// One skip of a layer list: the layers (indices) that stash and pop it.
struct SkipEdge {
  std::string name;  // full name
  int64_t stash_layer, pop_layer;
};

// Every skip of `layers`, in the order of their stashes. Throws, naming the
// layers involved, for a pop with no earlier stash, a second pop of one
// stash, a second stash of a name before its pop, and a stash never popped.
// Within one layer its pops come before its stashes.
std::vector<SkipEdge> skip_edges(const LayerList& layers);

// Per cell of a partition (cell_of_layer[i]): what crosses its boundaries.
struct SkipRoutes {
  // Direct (portals): by peer cell, the full names of the skips in the
  // message from that producer / to that consumer, in skip_edges order.
  std::map<int, std::vector<std::string>> from, to;
  // Routed: the names carried after the bundle in the activation message
  // received from the previous cell / sent to the next.
  std::vector<std::string> in_bundle, out_bundle;
  bool empty() const {
    return from.empty() && to.empty() && in_bundle.empty() && out_bundle.empty();
  }
};

// How skips between cells travel: kDirect sends each from its producing cell
// to its consuming cell (and the gradient back); kThroughCells carries it in
// the activation messages of every cell in between (the plain routing a
// bundle would give, kept to measure what direct links save).
enum class SkipTransport { kDirect, kThroughCells };
SkipTransport parse_skip_transport(const std::string& name);
const char* to_string(SkipTransport t);

std::vector<SkipRoutes> skip_routes(const std::vector<SkipEdge>& edges,
                                    const std::vector<int>& cell_of_layer, int cells,
                                    SkipTransport transport);

}  // namespace gpipe
