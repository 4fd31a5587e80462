#include "pipeline/placement.h"

#include <unordered_map>

namespace gpipe {

std::vector<std::vector<TiedWeight>> place_cells(const LayerList& layers,
                                                 const Partition& partition,
                                                 const std::vector<int>& local,
                                                 const std::vector<Device>& devices) {
  const int k = static_cast<int>(partition.cells());
  std::unordered_map<TensorImpl*, std::vector<int>> stages_of;
  std::vector<TensorImpl*> order;  // first appearance
  std::vector<std::vector<std::pair<TensorImpl*, Tensor*>>> slots(k);
  for (int s = 0; s < k; ++s)
    for (int64_t i = partition.begin(s); i < partition.end(s); ++i)
      for (auto& p : layers[i]->parameters()) {
        TensorImpl* impl = p.tensor->impl_ptr().get();
        auto& st = stages_of[impl];
        if (st.empty()) order.push_back(impl);
        if (st.empty() || st.back() != s) st.push_back(s);
        slots[s].push_back({impl, p.tensor});
      }
  std::vector<std::vector<TiedWeight>> ties;
  for (int s : local) {
    const Device dev = devices[s];
    std::unordered_map<TensorImpl*, Tensor> placed;  // this cell's tensor for each original
    std::unordered_map<TensorImpl*, Tensor*> copy;   // this cell's slot of each tied tensor
    for (auto& [impl, slot] : slots[s]) {
      auto it = placed.find(impl);
      if (it == placed.end()) {
        const bool tied = stages_of[impl].size() > 1;
        Tensor t = *slot;
        if (t.device() != dev || (tied && stages_of[impl].front() != s)) {
          MemoryCategoryGuard cat(MemoryCategory::kParameter);
          NoGradGuard no_grad;
          t = t.device() != dev ? slot->to(dev).detach() : slot->clone();
          t.set_requires_grad(slot->requires_grad());
        }
        it = placed.emplace(impl, t).first;
        if (tied) copy[impl] = slot;
      }
      *slot = it->second;
    }
    for (int64_t i = partition.begin(s); i < partition.end(s); ++i) layers[i]->to(dev);
    std::vector<TiedWeight> mine;
    for (TensorImpl* impl : order)
      if (stages_of[impl].size() > 1)
        mine.push_back({impl->shape.numel(), impl->dtype, stages_of[impl],
                        copy.count(impl) ? copy[impl] : nullptr});
    ties.push_back(std::move(mine));
  }
  return ties;
}

}  // namespace gpipe
