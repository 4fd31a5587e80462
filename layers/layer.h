// The Layer interface: the GPipe paper's triple (f_i, w_i, c_i).
//
//  - forward (f_i) maps an activation Bundle to an activation Bundle;
//  - parameters (w_i) are the named tensors it owns (and its sublayers');
//  - cost (c_i) estimates one forward pass in FLOPs from the input shapes;
//  - output_spec infers output shapes without computing anything.
//
// A Bundle (core/bundle.h) is the small ordered list of tensors that flows between layers
// (e.g. encoder output plus decoder state); every tensor in it is batch-major
// (axis 0 is the example), which is how a pipeline splits it into
// micro-batches. A custom layer implements forward with ops:: calls and gets
// gradients, partitioning, rematerialisation and placement with no more code.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/bundle.h"
#include "core/precision.h"
#include "core/tensor.h"
#include "layers/skip.h"

namespace gpipe {

// An output layer's result hidden w^T (an output projection) with the
// product not yet taken, so that a loss can fuse it into itself (Note [Fused
// output loss] in ops/loss.cc; Layer::forward_head, Loss::sum_head).
struct LinearHead {
  Tensor hidden;                              // [..., d]
  Tensor weight;                              // [C, d]
  Precision precision = Precision::kFloat32;  // the layer's: the product runs under it
  // The product as forward_layer returns the layer's output: ops::linear(hidden,
  // weight) under `precision`, a float32 result rounded to its 16-bit format.
  Bundle logits() const;
};

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  // f_i. Throws gpipe::Error naming the layer for a bundle it cannot take.
  virtual Bundle forward(const Bundle& in) = 0;
  // Shapes and dtypes of forward(in) for inputs of spec `in`; no compute.
  virtual BundleSpec output_spec(const BundleSpec& in) const = 0;
  // Under bf16 / fp16 precision, whether forward takes its 16-bit inputs as
  // they are (Note [16-bit activations] in layers/layer.cc): its ops then
  // keep 16-bit tensors for backward. false (the default): forward_layer
  // widens the inputs to float32 first, so a layer written for float32
  // works unchanged.
  virtual bool takes_16bit() const { return false; }
  // For a layer whose forward(in) is {ops::linear(h, w)} (one output: an
  // output projection): {h, w} without the product, such that
  // forward_head(in)->logits() is forward_layer's output. The pipeline's last
  // cell then gives them to a loss that takes_head() instead of the logits
  // (Note [Fused output loss] in ops/loss.cc). nullopt (the default): no head.
  virtual std::optional<LinearHead> forward_head(const Bundle& in);
  // c_i: FLOPs of one forward for inputs of spec `in`. The default counts the
  // multiply-adds of a dense layer: 2 * params * rows, rows = input[0]'s
  // elements divided by its last axis.
  virtual double cost(const BundleSpec& in) const;

  // w_i: own parameters then sublayers', named "<sublayer>.<param>" relative
  // to this layer. A tensor shared by two layers (tied weights) appears once
  // per owner; dedupe by tensor identity when you need unique tensors.
  std::vector<NamedTensor> parameters();
  // Non-trainable state (BatchNorm running statistics), named like parameters.
  std::vector<NamedTensor> buffers();
  int64_t parameter_count();  // unique tensors

  // Moves parameters and buffers to `device`, keeping ties: tensors shared
  // within this call (tracked in `moved`) stay shared on the new device.
  void to(Device device);
  void to(Device device, std::unordered_map<TensorImpl*, Tensor>& moved);
  Device device();

  bool training() const { return training_; }
  void train(bool on = true);
  void eval() { train(false); }

  // Called once after each optimizer step's forwards and backwards have all
  // run (e.g. BatchNorm folds the step's statistics into its running ones).
  virtual void finish_step();
  // Called instead of finish_step when a step failed: forget its side effects.
  virtual void discard_step();
  // Statistics gathered since the last finish_step that data-parallel
  // replicas should combine (summed element-wise across replicas) before
  // finish_step folds them: BatchNorm's per-channel sums and count. Empty
  // for most layers; the default concatenates the sublayers'.
  virtual std::vector<double> step_statistics() const;
  virtual void set_step_statistics(const std::vector<double>& summed);

  // Checks `in` has `count` tensors; throws naming this layer otherwise.
  void expect_inputs(const BundleSpec& in, size_t count) const;

  // Skip connections (layers/skip.h): the full names ("<namespace>/<name>")
  // this layer and its sublayers stash / pop in forward, as declared.
  std::vector<std::string> stashes() const;
  std::vector<std::string> pops() const;
  // Puts the skip names of this layer and its sublayers in namespace `ns`.
  void set_skip_namespace(const std::string& ns);
  const std::string& skip_namespace() const { return skip_ns_; }

 protected:
  void register_parameter(std::string name, Tensor* t);
  void register_buffer(std::string name, Tensor* t);
  void register_sublayer(std::string name, Layer* layer);
  virtual void on_train(bool) {}

  // Declared in the constructor: the names forward stashes and pops (in
  // this layer's skip namespace). Undeclared names are refused at run time.
  void declare_stash(const std::string& name);
  void declare_pop(const std::string& name);
  // In forward: hands `t` to the later layer that pops `name`, or takes it.
  void stash(const std::string& name, const Tensor& t) const;
  Tensor pop(const std::string& name) const;
  // In output_spec / cost: the same for specs (a popping layer's spec and
  // cost may depend on what it pops).
  void stash_spec(const std::string& name, const TensorSpec& spec) const;
  TensorSpec pop_spec(const std::string& name) const;

 private:
  void collect(std::vector<NamedTensor>& out, const std::string& prefix, bool params);
  void skip_names(bool stash, std::vector<std::string>& out) const;  // own, then sublayers

  std::string name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor*>> params_, buffers_;
  std::vector<std::pair<std::string, Layer*>> sublayers_;
  std::string skip_ns_;
  std::vector<std::string> stash_names_, pop_names_;  // as declared, without the namespace
};

using LayerPtr = std::shared_ptr<Layer>;
using LayerList = std::vector<LayerPtr>;

// ---- Names of a whole layer list (no Pipeline needed) ----
// A tensor's full name is "<layer>.<name within the layer>", e.g.
// "encoder_0.ffn.mlp.in.weight": what optimizers' state and checkpoints use.

// Every trainable tensor of `layers` once, in order of first appearance; a
// tensor shared by several layers (tied weights) appears under its first
// owner's name. This is the list to give an optimizer.
std::vector<NamedTensor> named_parameters(const LayerList& layers);
// Parameters then buffers of each layer under every name (a tied tensor once
// per owner): what save_checkpoint / load_checkpoint take (they store a
// shared tensor once).
std::vector<NamedTensor> named_state(const LayerList& layers);
// The names of each tied tensor, one group per tensor with two or more
// names (e.g. {"src_embed.shared_embedding", "tgt_embed.shared_embedding",
// "output.shared_embedding"} in the Transformer): LoadCheckpointOptions::aliases.
std::vector<std::vector<std::string>> tied_parameter_names(const LayerList& layers);

// layer.forward(in) at the thread's precision (Note [Mixed precision] in
// core/precision.h): under bf16 or fp16 the 16-bit inputs are widened to
// float32 first and the float32 outputs rounded to 16 bits; at fp32 just
// layer.forward(in). Everything that runs layers (run_layers, pipeline
// stages) calls this, so every cut sees the same roundings.
Bundle forward_layer(Layer& layer, const Bundle& in);
// layer.forward_head(in) with forward_layer's treatment of 16-bit inputs.
std::optional<LinearHead> forward_layer_head(Layer& layer, const Bundle& in);
// The bundle with its bfloat16 / float16 tensors cast to float32.
Bundle to_float32(const Bundle& in);

// Runs layers in order (no pipeline) at the thread's precision, outputs in
// float32: the single-device reference. With `head`, a last layer that has a
// forward_head leaves its head there instead, and the result is empty.
Bundle run_layers(const LayerList& layers, const Bundle& in,
                  std::optional<LinearHead>* head = nullptr);
// Output spec of a whole list, validating each step. `stashed`, if given,
// is the skip store the walk uses, and ends holding every stash's spec.
BundleSpec infer_specs(const LayerList& layers, const BundleSpec& in,
                       std::vector<BundleSpec>* each = nullptr, SkipSpecStore* stashed = nullptr);

// Makes a parameter: `t` under MemoryCategory::kParameter, requires_grad.
Tensor make_parameter(const Tensor& t);

}  // namespace gpipe
