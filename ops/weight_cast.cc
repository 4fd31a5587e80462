// Note [Weight casts] in ops/weight_cast.h: a thread-local cache, alive
// while the outermost WeightCastScope of the thread is.
#include "ops/weight_cast.h"

#include <atomic>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

#include "core/autograd.h"
#include "ops/elementwise.h"

namespace gpipe::ops {
namespace {

struct Entry {
  Tensor source;  // pins the weight, so its address is not reused while cached
  Tensor cast;
};
// By the bytes the weight views (a parameter and its detached copies, as
// backward holds them, share them): storage, offset, element count, dtype,
// and the rounding's kind.
using Key = std::tuple<const void*, int64_t, int64_t, int, int>;
using Cache = std::map<Key, Entry>;

thread_local Cache* t_cache = nullptr;
std::atomic<int64_t> g_casts{0};

}  // namespace

WeightCastScope::WeightCastScope() : owner_(t_cache == nullptr) {
  if (owner_) t_cache = new Cache();
}

WeightCastScope::~WeightCastScope() {
  if (!owner_) return;
  delete t_cache;
  t_cache = nullptr;
}

Tensor cached_weight_cast(const Tensor& weight, int variant, const std::function<Tensor()>& make) {
  const bool cacheable = t_cache != nullptr && weight.defined() && weight.is_contiguous() &&
                         !weight.impl_ptr()->grad_fn;
  if (!cacheable) {
    g_casts.fetch_add(1, std::memory_order_relaxed);
    return make();
  }
  const TensorImpl& impl = *weight.impl_ptr();
  const Key key{impl.storage.get(), impl.offset, weight.numel(), static_cast<int>(impl.dtype),
                variant};
  auto it = t_cache->find(key);
  if (it != t_cache->end()) return it->second.cast;
  g_casts.fetch_add(1, std::memory_order_relaxed);
  Tensor cast = make();
  t_cache->emplace(key, Entry{weight, cast});
  return cast;
}

int64_t weight_casts_made() { return g_casts.load(std::memory_order_relaxed); }

Tensor weight_operand(const Tensor& w, bool bf16) {
  NoGradGuard no_grad;
  if (bf16) return cached_weight_cast(w, 0, [&] { return cast(w, DType::kBFloat16); });
  return cast(cached_weight_cast(w, 1, [&] { return cast(w, DType::kFloat16); }), DType::kFloat32);
}

}  // namespace gpipe::ops
