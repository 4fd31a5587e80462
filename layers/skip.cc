#include "layers/skip.h"

#include <set>

#include "core/error.h"
#include "layers/layer.h"

namespace gpipe {
namespace {
thread_local SkipStore* t_store = nullptr;
thread_local SkipSpecStore* t_spec_store = nullptr;
}  // namespace

std::string skip_full_name(const std::string& ns, const std::string& name) {
  return ns + "/" + name;
}

void SkipStore::stash(const std::string& name, Tensor t, const std::string& layer) {
  GPIPE_CHECK(!held_.count(name), "layer '", layer, "' stashes skip '", name,
              "' while an earlier stash of it is not yet popped");
  held_.emplace(name, std::move(t));
}

Tensor SkipStore::pop(const std::string& name, const std::string& layer) {
  auto it = held_.find(name);
  GPIPE_CHECK(it != held_.end(), "layer '", layer, "' pops skip '", name,
              "' but nothing stashed it in this run (the layer declaring its stash did not "
              "stash it, or does not come before this one)");
  Tensor t = std::move(it->second);
  held_.erase(it);
  return t;
}

SkipStore SkipStore::detached() const {
  SkipStore out;
  for (const auto& [name, t] : held_) {
    Tensor leaf = t.defined() ? t.detach() : t;
    if (leaf.defined() && is_float_like(leaf.dtype())) leaf.set_requires_grad(true);
    out.held_.emplace(name, leaf);
  }
  return out;
}

TensorSpec SkipSpecStore::pop(const std::string& name, const std::string& layer) const {
  auto it = held_.find(name);
  GPIPE_CHECK(it != held_.end(), "layer '", layer, "' pops skip '", name,
              "' but no earlier layer of the list stashed it (output_spec and cost of a "
              "popping layer need the list: use infer_specs)");
  return it->second;
}

SkipScope::SkipScope(SkipStore* store) : previous_(t_store) { t_store = store; }
SkipScope::~SkipScope() { t_store = previous_; }
SkipSpecScope::SkipSpecScope(SkipSpecStore* store) : previous_(t_spec_store) {
  t_spec_store = store;
}
SkipSpecScope::~SkipSpecScope() { t_spec_store = previous_; }
SkipStore* current_skip_store() { return t_store; }
SkipSpecStore* current_skip_spec_store() { return t_spec_store; }

std::vector<SkipEdge> skip_edges(const LayerList& layers) {
  std::vector<SkipEdge> edges;
  std::map<std::string, size_t> open;      // name -> its edge, stashed and not yet popped
  std::map<std::string, size_t> finished;  // name -> its last popped edge
  auto layer_name = [&](int64_t i) { return layers[static_cast<size_t>(i)]->name(); };
  for (int64_t i = 0; i < static_cast<int64_t>(layers.size()); ++i) {
    const Layer& l = *layers[static_cast<size_t>(i)];
    std::set<std::string> seen;
    for (const std::string& name : l.pops()) {
      GPIPE_CHECK(seen.insert(name).second, "layer '", l.name(), "' declares its pop of skip '",
                  name, "' twice");
      auto it = open.find(name);
      if (it == open.end()) {
        auto done = finished.find(name);
        GPIPE_CHECK(done == finished.end(), "layer '", l.name(), "' pops skip '", name,
                    "', already popped by layer '", layer_name(edges[done->second].pop_layer),
                    "' (stashed by layer '", layer_name(edges[done->second].stash_layer),
                    "'): a stash is popped once");
        throw Error(detail::concat("layer '", l.name(), "' pops skip '", name,
                                   "' but no earlier layer stashes it"));
      }
      edges[it->second].pop_layer = i;
      finished[name] = it->second;
      open.erase(it);
    }
    seen.clear();
    for (const std::string& name : l.stashes()) {
      GPIPE_CHECK(seen.insert(name).second, "layer '", l.name(), "' declares its stash of skip '",
                  name, "' twice");
      auto it = open.find(name);
      GPIPE_CHECK(it == open.end(), "layer '", l.name(), "' stashes skip '", name,
                  "' while the stash of it by layer '", layer_name(edges[it->second].stash_layer),
                  "' is not yet popped");
      open[name] = edges.size();
      edges.push_back({name, i, -1});
    }
  }
  for (const auto& [name, e] : open)
    throw Error(detail::concat("layer '", layer_name(edges[e].stash_layer), "' stashes skip '",
                               name, "' but no later layer pops it (the list ends with layer '",
                               layer_name(static_cast<int64_t>(layers.size()) - 1), "')"));
  return edges;
}

SkipTransport parse_skip_transport(const std::string& name) {
  if (name == "direct") return SkipTransport::kDirect;
  if (name == "through-cells") return SkipTransport::kThroughCells;
  throw Error(
      detail::concat("unknown skip transport '", name, "' (expected direct or through-cells)"));
}

const char* to_string(SkipTransport t) {
  return t == SkipTransport::kDirect ? "direct" : "through-cells";
}

std::vector<SkipRoutes> skip_routes(const std::vector<SkipEdge>& edges,
                                    const std::vector<int>& cell_of_layer, int cells,
                                    SkipTransport transport) {
  std::vector<SkipRoutes> routes(static_cast<size_t>(cells));
  for (const SkipEdge& e : edges) {
    const int p = cell_of_layer.at(static_cast<size_t>(e.stash_layer));
    const int c = cell_of_layer.at(static_cast<size_t>(e.pop_layer));
    GPIPE_ASSERT(p <= c, "skip '", e.name, "' goes from cell ", p, " back to cell ", c);
    if (p == c) continue;  // popped in its own cell: nothing crosses a boundary
    if (transport == SkipTransport::kDirect) {
      routes[static_cast<size_t>(p)].to[c].push_back(e.name);
      routes[static_cast<size_t>(c)].from[p].push_back(e.name);
    } else {
      for (int s = p; s < c; ++s) routes[static_cast<size_t>(s)].out_bundle.push_back(e.name);
      for (int s = p + 1; s <= c; ++s) routes[static_cast<size_t>(s)].in_bundle.push_back(e.name);
    }
  }
  return routes;
}

}  // namespace gpipe
