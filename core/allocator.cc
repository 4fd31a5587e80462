// CPU allocator: aligned operator new with statistics. Each cpu:i device has
// its own instance, so K pipeline stages on one host report separately.
#include "core/allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace gpipe {

// Note [Huge pages]. Blocks of 2 MB or more are 2 MB-aligned and advised
// as transparent huge pages (madvise MADV_HUGEPAGE: where the kernel's THP
// mode is "madvise", Debian's default, nothing else gives a process huge
// pages). A GEMM packing the panels of a weight gradient, or the fused
// loss multiplying its logits' transpose, reads rows thousands of 4 KB
// pages apart, so with small pages those passes keep missing the TLB. W2's
// step against 4 KB pages, alternating runs on Zen 4: faster in 8 of 10
// pairs at 1 thread (about 1%) and in 4 of 4 at 2 threads (1-6%). A kernel
// with THP off ignores the advice; the block is used either way.
namespace {
constexpr size_t kHugePage = size_t{2} << 20;
size_t alignment_of(size_t bytes) { return bytes >= kHugePage ? kHugePage : kAllocAlignment; }
}  // namespace

void* system_allocate(size_t bytes) {
  void* p = ::operator new(bytes, std::align_val_t(alignment_of(bytes)), std::nothrow);
#ifdef MADV_HUGEPAGE  // (Linux)
  if (p != nullptr && bytes >= kHugePage) (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

void system_free(void* p, size_t bytes) {
  ::operator delete(p, std::align_val_t(alignment_of(bytes)));
}

namespace {

thread_local MemoryCategory t_category = MemoryCategory::kActivation;

// Installed RAM (0 if unknown): the most a CPU device can ever hold.
uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

// Note [Caching CPU allocator]. Fresh large allocations come from mmap and
// are paid for again in page faults on first touch, every step. Freed blocks
// are therefore kept in per-size-class free lists and handed out again: a
// request is rounded up to its class (four classes per power of two, so at
// most 25% slack; 64 bytes at least), and a block of the same class is reused
// if one is free. The statistics count the bytes asked for, exactly as
// without the cache, so memory reports do not change; the cache's own bytes
// are reported apart (MemoryStats::cached_bytes). The caches of all CPU
// devices together hold at most a quarter of physical memory
// (GPIPE_CPU_CACHE_MB overrides; 0 turns caching off), give everything back
// when an allocation fails and is retried, and release_cached_memory()
// empties them. Under AddressSanitizer caching is off
// by default, so freed memory stays poisoned and use-after-free is caught.
std::atomic<int64_t> g_cached_total{0};  // bytes cached by all CPU allocators

class CpuAllocator final : public Allocator {
 public:
  explicit CpuAllocator(int index) : device_(DeviceType::kCPU, index) {}
  ~CpuAllocator() override { release_cache(); }

  void* allocate(size_t bytes, MemoryCategory c) override {
    // A request no machine of this size could satisfy is refused here, before
    // the system allocator (or a sanitizer's) sees it and aborts the process.
    static const uint64_t physical = physical_memory_bytes();
    if ((physical > 0 && bytes > physical) || bytes > kMaxRequest)
      throw Error(detail::concat("out of memory on ", device_, ": ", bytes, " bytes requested for ",
                                 memory_category_name(c), ", more than the machine's ", physical,
                                 " bytes of physical memory (live: ", stats().str(), ")"));
    const size_t size = size_class(bytes);
    void* p = take_cached(size);
    if (p == nullptr) {
      p = system_allocate(size);
      if (p == nullptr) {  // give every device's cache back to the system and try once more
        release_cached_memory();
        p = system_allocate(size);
      }
      if (p == nullptr)
        throw Error(detail::concat("out of memory on ", device_, ": failed to allocate ", bytes,
                                   " bytes for ", memory_category_name(c),
                                   " (live: ", stats().str(), ")"));
    }
    charge(bytes, c);
    return p;
  }
  void deallocate(void* p, size_t bytes, MemoryCategory c) override {
    release(bytes, c);
    const size_t size = size_class(bytes);
    if (!put_cached(p, size)) system_free(p, size);
  }
  int64_t release_cache() override {
    std::vector<std::pair<size_t, std::vector<void*>>> lists;
    {
      std::lock_guard<std::mutex> lock(cache_mu_);
      for (auto& [size, blocks] : free_) lists.emplace_back(size, std::move(blocks));
      free_.clear();
      g_cached_total.fetch_sub(cached_);
      cached_ = 0;
      set_cached_bytes(0);
    }
    int64_t freed = 0;
    for (auto& [size, blocks] : lists)
      for (void* b : blocks) {
        system_free(b, size);
        freed += static_cast<int64_t>(size);
      }
    return freed;
  }
  Device device() const override { return device_; }

  // The size class of a request: multiples of 2^(p-2) in (2^p, 2^(p+1)].
  static size_t size_class(size_t bytes) {
    if (bytes <= kAllocAlignment) return kAllocAlignment;
    const int p =
        63 - __builtin_clzll(static_cast<unsigned long long>(bytes - 1));  // 2^p < bytes <= 2^(p+1)
    const size_t step = size_t{1} << (p - 2);
    return (bytes + step - 1) / step * step;
  }

 private:
  // Largest request served (the size classes are computed in 64 bits).
  static constexpr size_t kMaxRequest = size_t{1} << 60;

  // The cap on cached bytes, for all CPU devices of the process together.
  static int64_t cache_limit_bytes() {
    static const int64_t limit = [] {
      if (const char* env = std::getenv("GPIPE_CPU_CACHE_MB")) {
        char* end = nullptr;
        const long long mb = std::strtoll(env, &end, 10);
        if (end != env && *end == 0 && mb >= 0)
          return static_cast<int64_t>(std::min(mb, 1LL << 40)) << 20;
        std::fprintf(stderr,
                     "gpipe: GPIPE_CPU_CACHE_MB='%s' is not a count of MB; using the default\n",
                     env);
      }
#if defined(__SANITIZE_ADDRESS__)
      return int64_t{0};
#else
      return static_cast<int64_t>(physical_memory_bytes() / 4);
#endif
    }();
    return limit;
  }
  void* take_cached(size_t size) {
    if (cache_limit_bytes() == 0) return nullptr;
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = free_.find(size);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_ -= static_cast<int64_t>(size);
    g_cached_total.fetch_sub(static_cast<int64_t>(size));
    set_cached_bytes(cached_);
    return p;
  }
  bool put_cached(void* p, size_t size) {
    const int64_t limit = cache_limit_bytes();
    if (limit == 0) return false;
    std::lock_guard<std::mutex> lock(cache_mu_);
    // Reserve room under the process-wide cap (other devices count too).
    if (g_cached_total.fetch_add(static_cast<int64_t>(size)) + static_cast<int64_t>(size) > limit) {
      g_cached_total.fetch_sub(static_cast<int64_t>(size));
      return false;
    }
    free_[size].push_back(p);
    cached_ += static_cast<int64_t>(size);
    set_cached_bytes(cached_);
    return true;
  }

  Device device_;
  std::mutex cache_mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // size class -> free blocks
  int64_t cached_ = 0;
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
    case MemoryCategory::kParameter:
      return "parameter";
    case MemoryCategory::kGradient:
      return "gradient";
    case MemoryCategory::kOptimizerState:
      return "optimizer_state";
    case MemoryCategory::kActivation:
      return "activation";
    case MemoryCategory::kWorkspace:
      return "workspace";
  }
  return "?";
}

std::string MemoryStats::str() const {
  std::ostringstream os;
  for (int i = 0; i < kNumMemoryCategories; ++i)
    os << memory_category_name(static_cast<MemoryCategory>(i)) << "=" << live[i] << "B ";
  os << "total=" << live_total << "B peak=" << peak_total << "B";
  if (cached_bytes > 0) os << " cached=" << cached_bytes << "B";
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

void Allocator::recharge(size_t bytes, MemoryCategory from, MemoryCategory to) {
  if (from == to) return;
  std::lock_guard<std::mutex> lock(mu_);
  const int f = static_cast<int>(from), t = static_cast<int>(to);
  stats_.live[f] -= static_cast<int64_t>(bytes);
  stats_.live[t] += static_cast<int64_t>(bytes);
  if (stats_.live[t] > stats_.peak[t]) stats_.peak[t] = stats_.live[t];
}

void Allocator::set_cached_bytes(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.cached_bytes = bytes;
}

int64_t release_cached_memory() {
  Registry& r = registry();
  std::vector<Allocator*> all;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (auto& [key, a] : r.allocators) all.push_back(a.get());
  }
  int64_t freed = 0;
  for (Allocator* a : all) freed += a->release_cache();
  return freed;
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
  GPIPE_CHECK(f != nullptr, "device ", device,
              " is not available: gpipe was built without CUDA "
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
