// The autograd engine.
//
// backward() first walks the graph from the roots to count, for every node,
// how many edges point at it; a node runs once all of them have delivered
// (dependency counting), highest sequence number first among ready nodes, so
// the order is deterministic; a leaf's accumulator runs as soon as it is
// ready. Gradients for one node's outputs are summed in
// a buffer; a node whose outputs received no gradient at all is skipped.
// After a node runs, release() drops its saved tensors: graph memory goes
// back to the allocator as backward proceeds (Note [Graph freeing]).
#include "core/autograd_engine.h"

#include <limits>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd.h"

namespace gpipe {

namespace {

// Gradient buffers of the nodes that have not run yet: what their outputs
// have received so far, summed in arrival order.
class GradBuffers {
 public:
  void deliver(const Edge& e, const Tensor& g) {
    const TensorMeta& meta = e.fn->output_meta[e.input_nr];
    GPIPE_ASSERT(g.shape() == meta.shape, "gradient of shape ", g.shape(), " for '", e.fn->name(),
                 "' output ", e.input_nr, " of shape ", meta.shape);
    auto& buf = map_[e.fn.get()];
    if (buf.empty()) buf.resize(e.fn->output_meta.size());
    Tensor& slot = buf[e.input_nr];
    // A tensor's gradient has its dtype: a float32 gradient for a 16-bit
    // output (an op that computed it in float32) is rounded here, once; a
    // 16-bit gradient for a float32 output (a 16-bit seed for a float32
    // loss) is widened, exactly. Other mismatches (float64 for float32)
    // stay errors.
    const bool f32_for_half = g.dtype() == DType::kFloat32 && is_half(meta.dtype);
    const bool half_for_f32 = is_half(g.dtype()) && meta.dtype == DType::kFloat32;
    const Tensor gt = f32_for_half || half_for_f32 ? g.to(meta.dtype) : g;
    if (slot.defined())
      accumulate_into_slot(slot, gt);  // Note [Gradients in place]
    else
      slot = gt;
  }
  // The node's output gradients, zeros where an output received none; empty
  // when none did (the node is then skipped).
  std::vector<Tensor> take(Node* node) {
    std::vector<Tensor> in;
    if (auto it = map_.find(node); it != map_.end()) {
      in = std::move(it->second);
      map_.erase(it);
    }
    bool any = false;
    for (const Tensor& t : in) any = any || t.defined();
    if (!any) return {};
    in.resize(node->output_meta.size());
    for (size_t i = 0; i < in.size(); ++i) {
      const TensorMeta& m = node->output_meta[i];
      if (!in[i].defined()) in[i] = Tensor::zeros(m.shape, m.dtype, m.device);
    }
    return in;
  }

 private:
  std::unordered_map<Node*, std::vector<Tensor>> map_;
};

// The roots' starting gradients, with the edges they enter the graph by.
std::vector<std::pair<Edge, Tensor>> root_gradients(const std::vector<Tensor>& roots,
                                                    const std::vector<Tensor>& grads) {
  GPIPE_CHECK(grads.empty() || grads.size() == roots.size(), "backward: got ", grads.size(),
              " gradients for ", roots.size(), " roots");
  std::vector<std::pair<Edge, Tensor>> out;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    GPIPE_CHECK(r.requires_grad(), "backward: root ", i, " (shape ", r.shape(),
                ") does not require grad; nothing to differentiate");
    Tensor g;
    if (!grads.empty() && grads[i].defined()) {
      g = grads[i];
      GPIPE_CHECK(g.shape() == r.shape(), "backward: gradient ", i, " has shape ", g.shape(),
                  ", its root has shape ", r.shape());
    } else {
      GPIPE_CHECK(r.numel() == 1, "backward: root ", i, " has shape ", r.shape(),
                  "; pass its gradient explicitly (only one-element roots default to 1)");
      g = Tensor::full(r.shape(), 1.0, r.dtype(), r.device());
    }
    out.push_back({gradient_edge(r), g});
  }
  return out;
}

void check_gradient_count(const Node& node, const std::vector<Tensor>& out) {
  GPIPE_ASSERT(out.empty() || out.size() == node.next_edges.size(), "'", node.name(), "' returned ",
               out.size(), " gradients for ", node.next_edges.size(), " inputs");
}

// Ready nodes, the latest-created first: the engine's deterministic order.
struct LaterFirst {
  bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
    return a->sequence_nr < b->sequence_nr;
  }
};
using ReadyQueue =
    std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, LaterFirst>;

// Adds, for every node reachable from `stack` (already in `seen`), one
// dependency per edge into it.
void count_dependencies(std::vector<Node*> stack, std::unordered_set<Node*>& seen,
                        std::unordered_map<Node*, int>& deps) {
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      ++deps[e.fn.get()];
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph) {
  NoGradGuard no_grad;
  GradBuffers buffers;
  std::unordered_map<Node*, int> deps;
  std::vector<std::shared_ptr<Node>> start;
  for (auto& [e, g] : root_gradients(roots, grads)) {
    buffers.deliver(e, g);
    start.push_back(e.fn);
  }

  // Count dependencies over everything reachable from the roots.
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (auto& n : start)
    if (seen.insert(n.get()).second) stack.push_back(n.get());
  count_dependencies(std::move(stack), seen, deps);

  ReadyQueue ready;
  std::unordered_set<Node*> queued;
  for (auto& n : start)
    if (deps[n.get()] == 0 && queued.insert(n.get()).second) ready.push(n);

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    std::vector<Tensor> in = buffers.take(node.get());
    std::vector<Tensor> out;
    if (!in.empty()) {
      out = node->apply(std::move(in));
      check_gradient_count(*node, out);
    }
    if (!retain_graph) node->release();
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      if (i < out.size() && out[i].defined()) buffers.deliver(e, out[i]);
      if (--deps[e.fn.get()] == 0) ready.push(e.fn);
    }
  }
}

// Note [Split backward]. backward_input marks every node reachable from the
// roots that leads to one of the inputs' gradient accumulators: the input
// path. It runs those nodes alone, in the engine's order; an edge from an
// input-path node to a node off the path carries a weight gradient (a
// parameter's, possibly through views or other ops on parameters only). A
// node with such edges is deferred: a node that splits (record_split)
// computes its input-path gradients now and is kept with its output
// gradients for the rest; any other node computes everything now and hands
// over its weight gradients. WeightGradients::run() then runs the deferred
// entries and the off-path nodes below them with the engine's ordering
// (latest-created first, entries ordered by their node's creation), so each
// parameter receives the same terms in the same order as in backward().
struct WeightGradients::Impl {
  struct Entry {
    std::shared_ptr<Node> node;                   // a split node, or null
    std::vector<Tensor> grads;                    // its output gradients
    std::vector<bool> weight;                     // its edges off the input path
    std::vector<std::pair<Edge, Tensor>> handed;  // or: gradients computed already
    uint64_t sequence_nr = 0;
  };
  std::vector<Entry> entries;
  bool ran = false;
};

WeightGradients::WeightGradients() : impl_(std::make_unique<Impl>()) {}
WeightGradients::~WeightGradients() = default;
WeightGradients::WeightGradients(WeightGradients&&) noexcept = default;
WeightGradients& WeightGradients::operator=(WeightGradients&&) noexcept = default;
bool WeightGradients::empty() const { return !impl_ || impl_->entries.empty(); }
size_t WeightGradients::pending() const { return impl_ ? impl_->entries.size() : 0; }
size_t WeightGradients::deferred_ops() const {
  size_t n = 0;
  if (impl_)
    for (const auto& e : impl_->entries) n += e.node != nullptr;
  return n;
}

WeightGradients backward_input(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                               const std::vector<Tensor>& inputs) {
  NoGradGuard no_grad;
  const auto start = root_gradients(roots, grads);
  std::unordered_set<const TensorImpl*> targets;  // the leaves; their accumulators end the path
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    GPIPE_CHECK(!x.grad_fn(), "backward_input: input ", i, " (shape ", x.shape(),
                ") is not a leaf; the split backward fills the gradients of leaves");
    targets.insert(&x.impl());
  }
  // Post-order walk: a reachable node is on the input path when it is a
  // target or one of its edges leads to a node on the path.
  std::unordered_map<Node*, bool> on_path;
  std::vector<std::pair<Node*, size_t>> walk;
  for (const auto& [e, g] : start) {
    if (!on_path.emplace(e.fn.get(), false).second) continue;
    walk.push_back({e.fn.get(), 0});
    while (!walk.empty()) {
      Node* n = walk.back().first;
      const size_t i = walk.back().second++;
      if (i < n->next_edges.size()) {
        const Edge& c = n->next_edges[i];
        if (c.valid() && on_path.emplace(c.fn.get(), false).second) walk.push_back({c.fn.get(), 0});
        continue;
      }
      bool path = n->accumulates_into() && targets.count(n->accumulates_into()) > 0;
      for (const Edge& c : n->next_edges) path = path || (c.valid() && on_path[c.fn.get()]);
      on_path[n] = path;
      walk.pop_back();
    }
  }
  auto off_path = [&](const Edge& e) { return e.valid() && !on_path[e.fn.get()]; };

  WeightGradients result;
  auto& entries = result.impl_->entries;
  GradBuffers buffers;
  std::unordered_map<Node*, int> deps;
  for (const auto& [n, path] : on_path)
    if (path)
      for (const Edge& e : n->next_edges)
        if (e.valid() && on_path[e.fn.get()]) ++deps[e.fn.get()];
  ReadyQueue ready;
  std::unordered_set<Node*> queued;
  for (const auto& [e, g] : start) {
    if (off_path(e)) {  // a root that only parameters depend on: all of it is deferred
      // First in run(), in root order, as backward() delivers every root before any node runs.
      entries.push_back({nullptr, {}, {}, {{e, g}}, std::numeric_limits<uint64_t>::max()});
      continue;
    }
    buffers.deliver(e, g);
    if (deps[e.fn.get()] == 0 && queued.insert(e.fn.get()).second) ready.push(e.fn);
  }

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    const size_t n_edges = node->next_edges.size();
    std::vector<bool> weight(n_edges);
    bool has_weight = false;
    for (size_t i = 0; i < n_edges; ++i) {
      weight[i] = off_path(node->next_edges[i]);
      has_weight = has_weight || weight[i];
    }
    std::vector<Tensor> in = buffers.take(node.get());
    std::vector<Tensor> out;
    if (!in.empty() && has_weight && node->splits()) {
      std::vector<bool> wanted(n_edges);
      for (size_t i = 0; i < n_edges; ++i) wanted[i] = node->next_edges[i].valid() && !weight[i];
      out = node->apply_some(in, wanted);
      check_gradient_count(*node, out);
      entries.push_back({node, std::move(in), weight, {}, node->sequence_nr});
      // W uses only the weight edges: the kept node must not keep the input
      // path alive (its nodes, the inputs' accumulators and their leaves).
      for (size_t i = 0; i < n_edges; ++i)
        if (!weight[i] && i < out.size() && out[i].defined())
          buffers.deliver(node->next_edges[i], out[i]);
      for (size_t i = 0; i < n_edges; ++i) {
        Edge& e = node->next_edges[i];
        if (!e.valid() || weight[i]) continue;
        if (--deps[e.fn.get()] == 0) ready.push(e.fn);
        e = Edge{};
      }
      continue;
    } else {
      if (!in.empty()) {
        out = node->apply(std::move(in));
        check_gradient_count(*node, out);
      }
      node->release();
      WeightGradients::Impl::Entry handed{nullptr, {}, {}, {}, node->sequence_nr};
      for (size_t i = 0; i < out.size(); ++i)
        if (weight[i] && out[i].defined()) handed.handed.push_back({node->next_edges[i], out[i]});
      if (!handed.handed.empty()) entries.push_back(std::move(handed));
    }
    for (size_t i = 0; i < n_edges; ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid() || weight[i]) continue;
      if (i < out.size() && out[i].defined()) buffers.deliver(e, out[i]);
      if (--deps[e.fn.get()] == 0) ready.push(e.fn);
    }
  }
  return result;
}

void WeightGradients::run() {
  GPIPE_CHECK(impl_ && !impl_->ran,
              "WeightGradients::run: the deferred weight gradients ran already (they run once)");
  impl_->ran = true;
  NoGradGuard no_grad;
  auto& entries = impl_->entries;
  // The edges each entry delivers along, and the off-path nodes below them.
  auto entry_edges = [&](const Impl::Entry& en) {
    std::vector<Edge> edges;
    if (en.node) {
      for (size_t i = 0; i < en.weight.size(); ++i)
        if (en.weight[i]) edges.push_back(en.node->next_edges[i]);
    } else {
      for (const auto& [e, g] : en.handed) edges.push_back(e);
    }
    return edges;
  };
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (const auto& en : entries)
    for (const Edge& e : entry_edges(en)) {
      ++deps[e.fn.get()];
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  count_dependencies(std::move(stack), seen, deps);
  // One queue for entries (index >= 0) and nodes, latest-created first;
  // among equal creation numbers, entries (recorded in engine order) first.
  struct Item {
    uint64_t seq;
    int64_t entry;  // -1: a node
    std::shared_ptr<Node> node;
  };
  auto later_first = [](const Item& a, const Item& b) {
    if (a.seq != b.seq) return a.seq < b.seq;
    return a.entry < 0 ? b.entry >= 0 : (b.entry >= 0 && a.entry > b.entry);
  };
  std::priority_queue<Item, std::vector<Item>, decltype(later_first)> ready(later_first);
  for (size_t i = 0; i < entries.size(); ++i)
    ready.push({entries[i].sequence_nr, static_cast<int64_t>(i), nullptr});
  GradBuffers buffers;
  auto send = [&](const Edge& e, const Tensor& g) {
    if (g.defined()) buffers.deliver(e, g);
    if (--deps[e.fn.get()] == 0) ready.push({e.fn->sequence_nr, -1, e.fn});
  };
  while (!ready.empty()) {
    Item item = ready.top();
    ready.pop();
    if (item.entry >= 0) {
      Impl::Entry& en = entries[item.entry];
      if (en.node) {
        std::vector<Tensor> out = en.node->apply_some(en.grads, en.weight);
        check_gradient_count(*en.node, out);
        en.node->release();
        for (size_t i = 0; i < en.weight.size(); ++i)
          if (en.weight[i]) send(en.node->next_edges[i], i < out.size() ? out[i] : Tensor());
      } else {
        for (const auto& [e, g] : en.handed) send(e, g);
      }
      en = Impl::Entry{};  // frees the saved tensors and gradients now
      continue;
    }
    Node* node = item.node.get();
    std::vector<Tensor> in = buffers.take(node);
    std::vector<Tensor> out;
    if (!in.empty()) {
      out = node->apply(std::move(in));
      check_gradient_count(*node, out);
    }
    node->release();
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (e.valid()) send(e, i < out.size() ? out[i] : Tensor());
    }
  }
  entries.clear();
}

}  // namespace gpipe
