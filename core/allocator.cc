// CPU allocator: aligned operator new with statistics. Each cpu:i device has
// its own instance, so K pipeline stages on one host report separately.
#include "core/allocator.h"

#include <map>
#include <memory>
#include <new>
#include <sstream>

#include "core/error.h"

namespace gpipe {
namespace {

thread_local MemoryCategory t_category = MemoryCategory::kActivation;

class CpuAllocator final : public Allocator {
 public:
  explicit CpuAllocator(int index) : device_(DeviceType::kCPU, index) {}
  void* allocate(size_t bytes, MemoryCategory c) override {
    void* p = nullptr;
    try {
      p = ::operator new(bytes == 0 ? kAllocAlignment : bytes, std::align_val_t(kAllocAlignment));
    } catch (const std::bad_alloc&) {
      throw Error(detail::concat("out of memory on ", device_, ": failed to allocate ", bytes,
                                 " bytes for ", memory_category_name(c), " (live: ", stats().str(), ")"));
    }
    charge(bytes, c);
    return p;
  }
  void deallocate(void* p, size_t bytes, MemoryCategory c) override {
    ::operator delete(p, std::align_val_t(kAllocAlignment));
    release(bytes, c);
  }
  Device device() const override { return device_; }

 private:
  Device device_;
};

Allocator* make_cpu_allocator(int index) { return new CpuAllocator(index); }

struct Registry {
  std::mutex mu;
  std::map<std::pair<int, int>, std::unique_ptr<Allocator>> allocators;
  AllocatorFactory factories[kNumDeviceTypes] = {&make_cpu_allocator, nullptr};
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: tensors may outlive static destruction
  return *r;
}

}  // namespace

std::string_view memory_category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::kParameter: return "parameter";
    case MemoryCategory::kGradient: return "gradient";
    case MemoryCategory::kOptimizerState: return "optimizer_state";
    case MemoryCategory::kActivation: return "activation";
    case MemoryCategory::kWorkspace: return "workspace";
  }
  return "?";
}

std::string MemoryStats::str() const {
  std::ostringstream os;
  for (int i = 0; i < kNumMemoryCategories; ++i)
    os << memory_category_name(static_cast<MemoryCategory>(i)) << "=" << live[i] << "B ";
  os << "total=" << live_total << "B peak=" << peak_total << "B";
  return os.str();
}

MemoryStats Allocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Allocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak = stats_.live;
  stats_.peak_total = stats_.live_total;
}

void Allocator::charge(size_t bytes, MemoryCategory c) {
  std::lock_guard<std::mutex> lock(mu_);
  const int i = static_cast<int>(c);
  stats_.live[i] += static_cast<int64_t>(bytes);
  stats_.live_total += static_cast<int64_t>(bytes);
  if (stats_.live[i] > stats_.peak[i]) stats_.peak[i] = stats_.live[i];
  if (stats_.live_total > stats_.peak_total) stats_.peak_total = stats_.live_total;
  ++stats_.allocations;
}

void Allocator::release(size_t bytes, MemoryCategory c) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.live[static_cast<int>(c)] -= static_cast<int64_t>(bytes);
  stats_.live_total -= static_cast<int64_t>(bytes);
}

Allocator& allocator_for(Device device) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto key = std::make_pair(static_cast<int>(device.type), device.index);
  auto it = r.allocators.find(key);
  if (it != r.allocators.end()) return *it->second;
  AllocatorFactory f = r.factories[static_cast<int>(device.type)];
  GPIPE_CHECK(f != nullptr, "device ", device, " is not available: gpipe was built without CUDA "
              "(build with --config=cuda)");
  Allocator* a = f(device.index);
  GPIPE_ASSERT(a != nullptr);
  r.allocators.emplace(key, std::unique_ptr<Allocator>(a));
  return *a;
}

void register_allocator_factory(DeviceType type, AllocatorFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories[static_cast<int>(type)] = factory;
}

MemoryCategory current_memory_category() { return t_category; }

MemoryCategoryGuard::MemoryCategoryGuard(MemoryCategory c) : prev_(t_category) { t_category = c; }
MemoryCategoryGuard::~MemoryCategoryGuard() { t_category = prev_; }

}  // namespace gpipe
