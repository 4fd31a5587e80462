#include "ops/dispatch.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
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

namespace kernel_profile {
namespace {
struct Totals {
  std::mutex mu;
  std::map<std::string, Entry> by_name;
  std::map<std::string, Detail> details;
};
Totals& totals() {
  static Totals t;
  return t;
}
thread_local int t_depth = 0;
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// The values of one of the totals' maps, longest first.
template <class T>
std::vector<T> by_time(std::map<std::string, T> Totals::*map) {
  Totals& t = totals();
  std::vector<T> out;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    for (const auto& [name, e] : t.*map) out.push_back(e);
  }
  std::sort(out.begin(), out.end(), [](const T& a, const T& b) { return a.seconds > b.seconds; });
  return out;
}

}  // namespace

void set_enabled(bool on) { g_active.store(on, std::memory_order_relaxed); }

void reset() {
  Totals& t = totals();
  std::lock_guard<std::mutex> lock(t.mu);
  t.by_name.clear();
  t.details.clear();
}

void add_detail(const std::string& name, const std::string& slot, double seconds, double flops) {
  Totals& t = totals();
  std::lock_guard<std::mutex> lock(t.mu);
  Detail& d = t.details[slot + '\n' + name];
  d.name = name;
  d.slot = slot;
  ++d.calls;
  d.seconds += seconds;
  d.flops += flops;
}

std::vector<Detail> details() { return by_time(&Totals::details); }

std::vector<Entry> snapshot() { return by_time(&Totals::by_name); }

Call::Call(const char* name, double bytes)
    : name_(name), bytes_(bytes), start_ns_(now_ns()), outer_(t_depth++ == 0) {}

Within::Within() { ++t_depth; }
Within::~Within() { --t_depth; }

Call::~Call() {
  --t_depth;
  if (!outer_) return;
  const double seconds = static_cast<double>(now_ns() - start_ns_) * 1e-9;
  Totals& t = totals();
  std::lock_guard<std::mutex> lock(t.mu);
  Entry& e = t.by_name[name_];
  e.name = name_;
  ++e.calls;
  e.seconds += seconds;
  e.bytes += bytes_;
}
}  // namespace kernel_profile

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
