// Allocators with per-device, per-category memory statistics.
//
// Every byte a tensor owns is charged to one device and one category, so the
// paper's memory table (parameters vs activations per device) comes from
// measurement. The category of a new allocation is the calling thread's
// current category (MemoryCategoryGuard), Activation by default.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "core/device.h"

namespace gpipe {

enum class MemoryCategory : uint8_t {
  kParameter,
  kGradient,
  kOptimizerState,
  kActivation,
  kWorkspace
};
inline constexpr int kNumMemoryCategories = 5;
std::string_view memory_category_name(MemoryCategory c);

struct MemoryStats {
  std::array<int64_t, kNumMemoryCategories> live{};  // bytes allocated now
  std::array<int64_t, kNumMemoryCategories> peak{};  // high-water mark of live, per category
  int64_t live_total = 0;
  int64_t peak_total = 0;    // high-water mark of the sum over categories
  int64_t allocations = 0;   // number of allocate() calls
  int64_t cached_bytes = 0;  // freed blocks the allocator keeps for reuse (not in live/peak)
  int64_t live_bytes(MemoryCategory c) const { return live[static_cast<int>(c)]; }
  int64_t peak_bytes(MemoryCategory c) const { return peak[static_cast<int>(c)]; }
  std::string str() const;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns at least `bytes` bytes, 64-byte aligned; throws gpipe::Error on exhaustion.
  virtual void* allocate(size_t bytes, MemoryCategory category) = 0;
  virtual void deallocate(void* ptr, size_t bytes, MemoryCategory category) = 0;
  virtual Device device() const = 0;
  // Returns the blocks kept for reuse to the system; the bytes given back.
  // Live tensors are untouched. The CPU allocator implements it; the CUDA
  // caching allocator does not yet (runtime/cuda/allocator.h empty_cache).
  virtual int64_t release_cache() { return 0; }

  MemoryStats stats() const;
  // Sets every peak to the current live value (start of a new measurement window).
  void reset_peak();
  // Moves `bytes` of live memory from category `from` to `to` (a block that
  // changes role, e.g. a backward temporary adopted as a parameter's
  // gradient): the total is unchanged, `to`'s peak may rise; not an allocation.
  void recharge(size_t bytes, MemoryCategory from, MemoryCategory to);

 protected:
  void charge(size_t bytes, MemoryCategory c);
  void release(size_t bytes, MemoryCategory c);
  void set_cached_bytes(int64_t bytes);

 private:
  mutable std::mutex mu_;
  MemoryStats stats_;
};

inline constexpr size_t kAllocAlignment = 64;

// Memory straight from the system, outside every allocator's statistics and
// cache (what the allocators and the kernels' scratch buffers are made of):
// kAllocAlignment-aligned, and from 2 MB on 2 MB-aligned and advised as huge
// pages (Note [Huge pages] in core/allocator.cc). nullptr when the system
// has none. system_free takes the bytes system_allocate was given.
void* system_allocate(size_t bytes);
void system_free(void* p, size_t bytes);

// The allocator of `device`, created on first use; it lives for the process.
// Throws gpipe::Error for a device kind this build or machine cannot serve.
Allocator& allocator_for(Device device);

// Empties every device allocator's cache of freed blocks (release_cache);
// returns the bytes given back.
int64_t release_cached_memory();

// Lets a backend (CUDA) provide allocators for its device kind.
using AllocatorFactory = Allocator* (*)(int index);
void register_allocator_factory(DeviceType type, AllocatorFactory factory);

MemoryCategory current_memory_category();

// Charges allocations made by this thread to `c` while alive.
class MemoryCategoryGuard {
 public:
  explicit MemoryCategoryGuard(MemoryCategory c);
  ~MemoryCategoryGuard();
  MemoryCategoryGuard(const MemoryCategoryGuard&) = delete;
  MemoryCategoryGuard& operator=(const MemoryCategoryGuard&) = delete;

 private:
  MemoryCategory prev_;
};

}  // namespace gpipe
