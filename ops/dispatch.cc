#include "ops/dispatch.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>

#include "core/allocator.h"
#include "core/autograd.h"

namespace gpipe::ops {
namespace {
struct Names {
  std::mutex mu;
  std::set<std::string> names[kNumDeviceTypes];
  std::set<std::string> optional;
};
Names& names() {
  static Names* n = new Names;
  return *n;
}
}  // namespace

namespace half_args {
namespace {
std::atomic<CastHook> g_cast{nullptr};
void convert(const Tensor& src, Tensor& dst) {
  if (CastHook h = g_cast.load(std::memory_order_acquire)) return h(src, dst);
  dst.copy_from(src);
}
}  // namespace

void set_cast_hook(CastHook hook) { g_cast.store(hook, std::memory_order_release); }

bool half_tensor(const Tensor& t) { return t.defined() && is_half(t.dtype()); }

Tensor widen_for_kernel(const Tensor& t) {
  NoGradGuard no_grad;
  MemoryCategoryGuard category(MemoryCategory::kWorkspace);
  const Tensor src = t.is_contiguous() ? t : t.contiguous();
  Tensor wide = Tensor::empty(t.shape(), DType::kFloat32, t.device());
  convert(src, wide);
  return wide;
}

void narrow_from_kernel(const Tensor& wide, Tensor& out) {
  if (out.is_contiguous()) return convert(wide, out);
  NoGradGuard no_grad;
  MemoryCategoryGuard category(MemoryCategory::kWorkspace);
  Tensor dense = Tensor::empty(out.shape(), out.dtype(), out.device());
  convert(wide, dense);
  out.copy_from(dense);
}
}  // namespace half_args

void note_kernel(const char* name, DeviceType type) {
  Names& n = names();
  std::lock_guard<std::mutex> lock(n.mu);
  n.names[static_cast<int>(type)].insert(name);
}

void note_optional_kernel(const char* name) {
  Names& n = names();
  std::lock_guard<std::mutex> lock(n.mu);
  n.optional.insert(name);
}

bool is_optional_kernel(const std::string& name) {
  Names& n = names();
  std::lock_guard<std::mutex> lock(n.mu);
  return n.optional.count(name) > 0;
}

std::vector<std::string> registered_kernels(DeviceType type) {
  Names& n = names();
  std::lock_guard<std::mutex> lock(n.mu);
  const auto& s = n.names[static_cast<int>(type)];
  return {s.begin(), s.end()};
}

}  // namespace gpipe::ops
