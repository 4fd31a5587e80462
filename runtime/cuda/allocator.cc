// Note [CUDA caching allocator]
//
// cudaMalloc is slow and cudaFree synchronises the whole device, so a freed
// block is kept and handed to the next request of the same size class.
//
// Size classes: a request is rounded up to a multiple of 512 bytes up to
// 1 MiB, and above that to a multiple of a quarter of the largest power of
// two not above it (so at most 25% is wasted). A free block is reused only
// for a request of exactly its class: no splitting or merging, which keeps
// the bookkeeping trivial and is enough for training loops whose shapes
// repeat every step.
//
// Streams: a block belongs to the stream it was allocated for (the device's
// compute stream) and is kept in that stream's free list. Freeing it makes it
// reusable at once, because any later kernel on the same stream runs after
// every earlier use of the block. If a block was also used on another stream
// (record_stream: a cross-device copy on a copy stream), freeing records an
// event on each such stream, and the block returns to the free list only
// when all of those events have completed (polled on every allocation).
//
// Out of memory: wait for the pending events, return every cached block to
// CUDA, retry once; then throw gpipe::Error naming the device, the request
// and the live statistics.
//
// Statistics: charge/release count the bytes tensors asked for, per
// category, like the CPU allocator; rounding and caching show in cache_stats.
// deallocate never throws (it runs in Storage's destructor): if CUDA fails
// there, e.g. while the process exits, the block is simply not reused.
#include "runtime/cuda/allocator.h"

#include <algorithm>
#include <bit>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/system_limits.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device.h"

namespace gpipe::cuda {
namespace {

constexpr size_t kMinBlock = 512;
constexpr size_t kSmallLimit = size_t{1} << 20;

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int index) : device_(DeviceType::kCUDA, index) { check_device(index); }

  void* allocate(size_t bytes, MemoryCategory category) override {
    const size_t size = round_size(bytes);
    DeviceGuard guard(device_.index);
    const cudaStream_t stream = compute_stream(device_.index);
    void* ptr = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      process_events_locked(/*wait=*/false);
      Block* b = take_free_locked(stream, size);
      if (b == nullptr) b = malloc_locked(stream, size, bytes, category);
      b->allocated = true;
      cache_.cached_bytes -= static_cast<int64_t>(b->size);
      ptr = b->ptr;
    }
    charge(bytes, category);
    return ptr;
  }

  void deallocate(void* ptr, size_t bytes, MemoryCategory category) override {
    release(bytes, category);
    try {
      DeviceGuard guard(device_.index);
      std::lock_guard<std::mutex> lock(mu_);
      auto it = blocks_.find(ptr);
      if (it == blocks_.end()) return;  // not ours: nothing sensible to do in a destructor
      Block* b = it->second.get();
      b->allocated = false;
      cache_.cached_bytes += static_cast<int64_t>(b->size);
      for (cudaStream_t s : b->uses) {
        int stream_device = device_.index;  // an event must be made on its stream's device
        GPIPE_CUDA_CHECK(cudaStreamGetDevice(s, &stream_device));
        DeviceGuard on_stream_device(stream_device);
        cudaEvent_t e = nullptr;
        GPIPE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        GPIPE_CUDA_CHECK(cudaEventRecord(e, s));
        events_.emplace_back(e, b);
        ++b->pending;
      }
      b->uses.clear();
      if (b->pending == 0) free_[{b->stream, b->size}].push_back(b);
    } catch (...) {
      // Leave the block out of the free lists: leaking beats reusing memory
      // another stream may still read.
    }
  }

  Device device() const override { return device_; }

  void record_stream(const void* ptr, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(const_cast<void*>(ptr));
    GPIPE_ASSERT(it != blocks_.end() && it->second->allocated, "record_stream: ", ptr,
                 " is not a live block of ", device_);
    Block* b = it->second.get();
    if (stream == b->stream) return;
    for (cudaStream_t s : b->uses)
      if (s == stream) return;
    b->uses.push_back(stream);
  }

  CacheStats cache_stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return cache_;
  }

  void empty_cache() {
    DeviceGuard guard(device_.index);
    std::lock_guard<std::mutex> lock(mu_);
    process_events_locked(/*wait=*/true);
    release_free_locked();
  }

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
    cudaStream_t stream = nullptr;  // the stream it was allocated for
    bool allocated = false;
    std::vector<cudaStream_t> uses;  // other streams that used it (record_stream)
    int pending = 0;                 // events not yet completed since it was freed
  };
  using PoolKey = std::pair<cudaStream_t, size_t>;

  Block* take_free_locked(cudaStream_t stream, size_t size) {
    auto it = free_.find({stream, size});
    if (it == free_.end() || it->second.empty()) return nullptr;
    Block* b = it->second.back();
    it->second.pop_back();
    return b;
  }

  Block* malloc_locked(cudaStream_t stream, size_t size, size_t requested,
                       MemoryCategory category) {
    void* ptr = nullptr;
    cudaError_t s = cudaMalloc(&ptr, size);
    if (s == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      process_events_locked(/*wait=*/true);
      release_free_locked();
      s = cudaMalloc(&ptr, size);
    }
    if (s == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw Error(detail::concat("out of memory on ", device_, ": failed to allocate ", requested,
                                 " bytes (", size, " rounded) for ", memory_category_name(category),
                                 " (live: ", stats().str(), "; reserved ", cache_.reserved_bytes,
                                 "B, of which cached ", cache_.cached_bytes, "B)"));
    }
    if (s != cudaSuccess) throw_status(s, "cudaMalloc", __FILE__, __LINE__);
    auto b = std::make_unique<Block>();
    b->ptr = ptr;
    b->size = size;
    b->stream = stream;
    Block* raw = b.get();
    blocks_.emplace(ptr, std::move(b));
    cache_.reserved_bytes += static_cast<int64_t>(size);
    cache_.cached_bytes += static_cast<int64_t>(size);  // allocate() moves it to live
    ++cache_.segments;
    ++cache_.cuda_mallocs;
    return raw;
  }

  // Moves blocks whose events have all completed back to the free lists.
  void process_events_locked(bool wait) {
    while (!events_.empty()) {
      auto [e, b] = events_.front();
      if (wait) {
        GPIPE_CUDA_CHECK(cudaEventSynchronize(e));
      } else {
        const cudaError_t s = cudaEventQuery(e);
        if (s == cudaErrorNotReady) {
          (void)cudaGetLastError();
          return;  // events complete roughly in order; try again next time
        }
        if (s != cudaSuccess) throw_status(s, "cudaEventQuery", __FILE__, __LINE__);
      }
      (void)cudaEventDestroy(e);
      events_.pop_front();
      if (--b->pending == 0 && !b->allocated) free_[{b->stream, b->size}].push_back(b);
    }
  }

  // Returns every free block to CUDA (cudaFree synchronises the device).
  void release_free_locked() {
    for (auto& [key, list] : free_) {
      for (Block* b : list) {
        GPIPE_CUDA_CHECK(cudaFree(b->ptr));
        cache_.reserved_bytes -= static_cast<int64_t>(b->size);
        cache_.cached_bytes -= static_cast<int64_t>(b->size);
        --cache_.segments;
        blocks_.erase(b->ptr);
      }
    }
    free_.clear();
  }

  Device device_;
  std::mutex mu_;
  std::unordered_map<void*, std::unique_ptr<Block>> blocks_;
  std::map<PoolKey, std::vector<Block*>> free_;
  std::deque<std::pair<cudaEvent_t, Block*>> events_;
  CacheStats cache_;
};

Allocator* make_caching_allocator(int index) { return new CachingAllocator(index); }

// What the fail-fast memory check asks (Note [Preflight] in tools/train/preflight.cc):
// the device's free memory now.
uint64_t free_memory(int index) {
  check_device(index);
  DeviceGuard guard(index);
  size_t free = 0, total = 0;
  GPIPE_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<uint64_t>(free);
}

[[maybe_unused]] const bool g_registered = [] {
  register_allocator_factory(DeviceType::kCUDA, &make_caching_allocator);
  register_free_memory_query(static_cast<int>(DeviceType::kCUDA), &free_memory);
  return true;
}();

CachingAllocator& caching_allocator(int device) {
  auto* a = dynamic_cast<CachingAllocator*>(&allocator_for(Device(DeviceType::kCUDA, device)));
  GPIPE_ASSERT(a != nullptr, "the allocator of cuda:", device,
               " is not the CUDA caching allocator");
  return *a;
}

}  // namespace

size_t round_size(size_t bytes) {
  if (bytes <= kSmallLimit)
    return std::max(kMinBlock, (bytes + kMinBlock - 1) / kMinBlock * kMinBlock);
  const size_t step = std::bit_floor(bytes) / 4;
  return (bytes + step - 1) / step * step;
}

void record_stream(Device device, const void* ptr, cudaStream_t stream) {
  GPIPE_ASSERT(device.is_cuda(), "record_stream on ", device);
  caching_allocator(device.index).record_stream(ptr, stream);
}

CacheStats cache_stats(int device) { return caching_allocator(device).cache_stats(); }

void empty_cache(int device) { caching_allocator(device).empty_cache(); }

}  // namespace gpipe::cuda
