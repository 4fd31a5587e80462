#include "layers/layer.h"

#include <algorithm>
#include <unordered_set>

#include "core/precision.h"
#include "layers/skip.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"

namespace gpipe {

double Layer::cost(const BundleSpec& in) const {
  if (in.empty() || in[0].shape.rank() == 0) return 0.0;
  const double rows = static_cast<double>(in[0].shape.numel()) /
                      std::max<int64_t>(in[0].shape[in[0].shape.rank() - 1], 1);
  return 2.0 * static_cast<double>(const_cast<Layer*>(this)->parameter_count()) * rows;
}

void Layer::collect(std::vector<NamedTensor>& out, const std::string& prefix, bool params) {
  for (auto& [n, t] : params ? params_ : buffers_) out.push_back({prefix + n, t});
  for (auto& [n, l] : sublayers_) l->collect(out, prefix + n + ".", params);
}

std::vector<NamedTensor> Layer::parameters() {
  std::vector<NamedTensor> out;
  collect(out, "", true);
  return out;
}

std::vector<NamedTensor> Layer::buffers() {
  std::vector<NamedTensor> out;
  collect(out, "", false);
  return out;
}

int64_t Layer::parameter_count() {
  std::unordered_set<TensorImpl*> seen;
  int64_t n = 0;
  for (auto& p : parameters())
    if (seen.insert(p.tensor->impl_ptr().get()).second) n += p.tensor->numel();
  return n;
}

void Layer::to(Device device) {
  std::unordered_map<TensorImpl*, Tensor> moved;
  to(device, moved);
}

void Layer::to(Device device, std::unordered_map<TensorImpl*, Tensor>& moved) {
  auto move_all = [&](std::vector<NamedTensor> list, MemoryCategory cat) {
    for (auto& p : list) {
      Tensor& t = *p.tensor;
      if (!t.defined() || t.device() == device) continue;
      auto it = moved.find(t.impl_ptr().get());
      if (it != moved.end()) {
        t = it->second;
        continue;
      }
      MemoryCategoryGuard guard(cat);
      NoGradGuard no_grad;
      Tensor c = t.to(device).detach();
      if (t.requires_grad()) c.set_requires_grad(true);
      moved.emplace(t.impl_ptr().get(), c);
      t = c;
    }
  };
  move_all(parameters(), MemoryCategory::kParameter);
  move_all(buffers(), MemoryCategory::kParameter);
}

Device Layer::device() {
  for (auto& p : parameters()) return p.tensor->device();
  for (auto& b : buffers()) return b.tensor->device();
  return kCpu;
}

void Layer::train(bool on) {
  training_ = on;
  on_train(on);
  for (auto& [n, l] : sublayers_) l->train(on);
}

void Layer::finish_step() {
  for (auto& [n, l] : sublayers_) l->finish_step();
}

void Layer::discard_step() {
  for (auto& [n, l] : sublayers_) l->discard_step();
}

std::vector<double> Layer::step_statistics() const {
  std::vector<double> out;
  for (const auto& [n, l] : sublayers_) {
    const std::vector<double> part = l->step_statistics();
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

void Layer::set_step_statistics(const std::vector<double>& summed) {
  size_t at = 0;
  for (auto& [n, l] : sublayers_) {
    const size_t len = l->step_statistics().size();
    GPIPE_CHECK(at + len <= summed.size(), "layer '", name_, "': set_step_statistics got ",
                summed.size(), " values, too few");
    if (len > 0)
      l->set_step_statistics(std::vector<double>(summed.begin() + at, summed.begin() + at + len));
    at += len;
  }
  GPIPE_CHECK(at == summed.size(), "layer '", name_, "': set_step_statistics got ", summed.size(),
              " values, expected ", at);
}

void Layer::expect_inputs(const BundleSpec& in, size_t count) const {
  GPIPE_CHECK(in.size() == count, "layer '", name_, "': expected a bundle of ", count,
              " tensors, got ", in.size(), " ", to_string(in));
}

void Layer::register_parameter(std::string name, Tensor* t) {
  params_.emplace_back(std::move(name), t);
}
void Layer::register_buffer(std::string name, Tensor* t) {
  buffers_.emplace_back(std::move(name), t);
}
void Layer::register_sublayer(std::string name, Layer* layer) {
  sublayers_.emplace_back(std::move(name), layer);
}

void Layer::skip_names(bool stash, std::vector<std::string>& out) const {
  for (const std::string& n : stash ? stash_names_ : pop_names_)
    out.push_back(skip_full_name(skip_ns_, n));
  for (const auto& [name, l] : sublayers_) l->skip_names(stash, out);
}

std::vector<std::string> Layer::stashes() const {
  std::vector<std::string> out;
  skip_names(true, out);
  return out;
}

std::vector<std::string> Layer::pops() const {
  std::vector<std::string> out;
  skip_names(false, out);
  return out;
}

void Layer::set_skip_namespace(const std::string& ns) {
  GPIPE_CHECK(ns.find('/') == std::string::npos, "layer '", name_, "': skip namespace '", ns,
              "' contains '/'");
  skip_ns_ = ns;
  for (auto& [name, l] : sublayers_) l->set_skip_namespace(ns);
}

void Layer::declare_stash(const std::string& name) {
  GPIPE_CHECK(!name.empty(), "layer '", name_, "': empty skip name");
  stash_names_.push_back(name);
}

void Layer::declare_pop(const std::string& name) {
  GPIPE_CHECK(!name.empty(), "layer '", name_, "': empty skip name");
  pop_names_.push_back(name);
}

namespace {
void check_declared(const std::vector<std::string>& declared, const std::string& name,
                    const std::string& layer, bool stash) {
  for (const std::string& d : declared)
    if (d == name) return;
  throw Error(detail::concat("layer '", layer, "' ", stash ? "stashes" : "pops", " skip '", name,
                             "' without declaring it (call declare_", stash ? "stash" : "pop",
                             "(\"", name, "\") in its constructor)"));
}
}  // namespace

// Note [16-bit skips]. Under bf16 / fp16 precision a float32 skip is held,
// and so sent between cells, in the 16-bit storage format, like every
// layer output (forward_layer), and popped as float32 again; both are
// differentiable casts, so the skip's gradient is 16-bit too. The single
// device (run_layers) and every pipeline round the same tensors, so they
// still compute the same operations. Specs follow: a stashed spec is
// 16-bit (the planner's skip bytes), a popped one float32.
namespace {
bool half_skip(DType dtype) {  // held in 16 bits
  return current_precision() != Precision::kFloat32 && dtype == DType::kFloat32;
}
bool widened_skip(DType dtype) {  // handed back as float32
  return current_precision() != Precision::kFloat32 && is_half(dtype);
}
}  // namespace

void Layer::stash(const std::string& name, const Tensor& t) const {
  check_declared(stash_names_, name, name_, true);
  SkipStore* store = current_skip_store();
  GPIPE_CHECK(store != nullptr, "layer '", name_, "' stashes skip '", name,
              "' outside a layer list's run (run it with run_layers or in a Pipeline)");
  const Tensor held =
      t.defined() && half_skip(t.dtype()) ? ops::cast(t, storage_dtype(current_precision())) : t;
  store->stash(skip_full_name(skip_ns_, name), held, name_);
}

Tensor Layer::pop(const std::string& name) const {
  check_declared(pop_names_, name, name_, false);
  SkipStore* store = current_skip_store();
  GPIPE_CHECK(store != nullptr, "layer '", name_, "' pops skip '", name,
              "' outside a layer list's run (run it with run_layers or in a Pipeline)");
  Tensor t = store->pop(skip_full_name(skip_ns_, name), name_);
  return t.defined() && widened_skip(t.dtype()) ? ops::cast(t, DType::kFloat32) : t;
}

void Layer::stash_spec(const std::string& name, const TensorSpec& spec) const {
  check_declared(stash_names_, name, name_, true);
  if (SkipSpecStore* store = current_skip_spec_store()) {
    TensorSpec held = spec;
    if (half_skip(held.dtype)) held.dtype = storage_dtype(current_precision());
    store->stash(skip_full_name(skip_ns_, name), held);
  }
}

TensorSpec Layer::pop_spec(const std::string& name) const {
  check_declared(pop_names_, name, name_, false);
  SkipSpecStore* store = current_skip_spec_store();
  GPIPE_CHECK(store != nullptr, "layer '", name_, "' pops skip '", name,
              "' outside a layer list (its output_spec and cost need the list: use infer_specs)");
  TensorSpec spec = store->pop(skip_full_name(skip_ns_, name), name_);
  if (widened_skip(spec.dtype)) spec.dtype = DType::kFloat32;
  return spec;
}

// Note [16-bit activations]. Under bf16 / fp16 precision a layer's inputs
// arrive 16-bit. A layer that says takes_16bit() runs on them as they are:
// every op takes 16-bit tensors (Note [16-bit kernels] in ops/dispatch.h:
// the kernels compute in float32 on scratch copies), returns 16-bit
// activations (linear and conv round their float32 products; statistics,
// losses and parameter gradients stay float32), and keeps 16-bit tensors
// for backward, so the activations a layer holds are half of float32's.
// Any other layer gets its inputs widened to float32 (and then keeps
// float32 copies), as before. Either way the outputs are rounded to the
// 16-bit format here, so the layer boundaries, and hence the pipeline's
// equivalence with one device, are unchanged. The last layer's outputs
// reach the loss as they are when the loss takes_16bit() (cross-entropy
// reads 16-bit logits row by row in float32), else widened to float32.
Bundle forward_layer(Layer& layer, const Bundle& in) {
  const Precision p = current_precision();
  if (p == Precision::kFloat32) return layer.forward(in);
  Bundle out = layer.forward(layer.takes_16bit() ? in : to_float32(in));
  for (Tensor& t : out)
    if (t.defined() && t.dtype() == DType::kFloat32) t = ops::cast(t, storage_dtype(p));
  return out;
}

std::optional<LinearHead> forward_layer_head(Layer& layer, const Bundle& in) {
  const Precision p = current_precision();
  return layer.forward_head(p == Precision::kFloat32 || layer.takes_16bit() ? in : to_float32(in));
}

std::optional<LinearHead> Layer::forward_head(const Bundle&) { return std::nullopt; }

Bundle LinearHead::logits() const {
  PrecisionScope scope(precision);
  Tensor y = ops::linear(hidden, weight);
  if (precision != Precision::kFloat32 && y.dtype() == DType::kFloat32)
    y = ops::cast(y, storage_dtype(precision));
  return {y};
}

Bundle to_float32(const Bundle& in) {
  Bundle out = in;
  for (Tensor& t : out)
    if (t.defined() && is_half(t.dtype())) t = ops::cast(t, DType::kFloat32);
  return out;
}

Bundle run_layers(const LayerList& layers, const Bundle& in, std::optional<LinearHead>* head) {
  SkipStore store;
  SkipScope scope(&store);
  Bundle x = in;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (head && i + 1 == layers.size() && (*head = forward_layer_head(*layers[i], x))) {
      x.clear();
      break;
    }
    x = forward_layer(*layers[i], x);
  }
  x = to_float32(x);
  GPIPE_CHECK(store.empty(), "run_layers: skip '", store.held().begin()->first,
              "' was stashed and never popped (a layer declares a pop its forward skipped, or "
              "the list ends before the popping layer)");
  return x;
}

BundleSpec infer_specs(const LayerList& layers, const BundleSpec& in, std::vector<BundleSpec>* each,
                       SkipSpecStore* stashed) {
  SkipSpecStore own;
  SkipSpecScope scope(stashed ? stashed : &own);
  BundleSpec s = in;
  for (const auto& l : layers) {
    if (each) each->push_back(s);
    s = l->output_spec(s);
  }
  return s;
}

Tensor make_parameter(const Tensor& t) {
  MemoryCategoryGuard guard(MemoryCategory::kParameter);
  Tensor p = t.clone();
  p.set_requires_grad(true);
  return p;
}

std::vector<NamedTensor> named_parameters(const LayerList& layers) {
  std::vector<NamedTensor> out;
  std::unordered_set<TensorImpl*> seen;
  for (const LayerPtr& l : layers)
    for (NamedTensor& p : l->parameters())
      if (seen.insert(p.tensor->impl_ptr().get()).second)
        out.push_back({l->name() + "." + p.name, p.tensor});
  return out;
}

std::vector<NamedTensor> named_state(const LayerList& layers) {
  std::vector<NamedTensor> out;
  for (const LayerPtr& l : layers) {
    for (NamedTensor& p : l->parameters()) out.push_back({l->name() + "." + p.name, p.tensor});
    for (NamedTensor& b : l->buffers()) out.push_back({l->name() + "." + b.name, b.tensor});
  }
  return out;
}

std::vector<std::vector<std::string>> tied_parameter_names(const LayerList& layers) {
  std::unordered_map<TensorImpl*, size_t> group_of;
  std::vector<std::vector<std::string>> groups;
  for (const LayerPtr& l : layers)
    for (NamedTensor& p : l->parameters()) {
      auto [it, fresh] = group_of.try_emplace(p.tensor->impl_ptr().get(), groups.size());
      if (fresh) groups.emplace_back();
      groups[it->second].push_back(l->name() + "." + p.name);
    }
  std::vector<std::vector<std::string>> tied;
  for (auto& g : groups)
    if (g.size() > 1) tied.push_back(std::move(g));
  return tied;
}

}  // namespace gpipe
