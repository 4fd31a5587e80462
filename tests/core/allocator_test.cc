#include "core/allocator.h"

#include <catch2/catch.hpp>

#include "core/autograd.h"
#include "core/tensor.h"

using namespace gpipe;

// Each test uses its own cpu:N device so the statistics start from zero.
TEST_CASE("allocator: live and peak bytes per category follow a known pattern") {
  const Device dev("cpu:41");
  Allocator& a = allocator_for(dev);
  REQUIRE(a.stats().live_total == 0);
  {
    MemoryCategoryGuard cat(MemoryCategory::kParameter);
    Tensor w = Tensor::zeros(Shape{256}, DType::kFloat32, dev);  // 1024 B
    CHECK(a.stats().live_bytes(MemoryCategory::kParameter) == 1024);
    {
      MemoryCategoryGuard act(MemoryCategory::kActivation);
      Tensor x = Tensor::zeros(Shape{512}, DType::kFloat64, dev);  // 4096 B
      Tensor y = Tensor::zeros(Shape{128}, DType::kFloat64, dev);  // 1024 B
      CHECK(a.stats().live_bytes(MemoryCategory::kActivation) == 5120);
      CHECK(a.stats().live_total == 6144);
    }
    const MemoryStats s = a.stats();
    CHECK(s.live_bytes(MemoryCategory::kActivation) == 0);
    CHECK(s.peak_bytes(MemoryCategory::kActivation) == 5120);
    CHECK(s.peak_total == 6144);
    CHECK(s.live_total == 1024);
    CHECK(s.allocations == 3);
  }
  CHECK(a.stats().live_total == 0);
  a.reset_peak();
  CHECK(a.stats().peak_total == 0);
}

TEST_CASE("allocator: devices are accounted separately; default category is activation") {
  const Device d1("cpu:42"), d2("cpu:43");
  Tensor t = Tensor::zeros(Shape{16}, DType::kFloat32, d1);
  CHECK(allocator_for(d1).stats().live_bytes(MemoryCategory::kActivation) == 64);
  CHECK(allocator_for(d2).stats().live_total == 0);
  Tensor u = t.to(d2);
  CHECK(allocator_for(d2).stats().live_total == 64);
}

TEST_CASE("allocator: 64-byte alignment for every allocation") {
  for (int n : {1, 3, 17, 1000}) {
    Tensor t = Tensor::empty(Shape{n}, DType::kFloat32, Device("cpu:44"));
    CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0);
  }
}

TEST_CASE("allocator: blocks of 2 MB or more are 2 MB-aligned for huge pages") {
  // The alignment is what lets the kernel back them with 2 MB pages (Note
  // [Huge pages] in core/allocator.cc).
  const Device dev("cpu:49");
  for (int64_t n : {int64_t{1} << 19, (int64_t{3} << 19) + 5, int64_t{1} << 22}) {
    Tensor t = Tensor::empty(Shape{n}, DType::kFloat32, dev);  // 2 MB, 6 MB + 20 B, 16 MB
    INFO(n << " floats");
    CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % (uintptr_t{2} << 20) == 0);
    CHECK(allocator_for(dev).stats().live_total == n * 4);  // the request, as for any block
    t.fill(1.0);
    CHECK(t.to_vector<float>()[static_cast<size_t>(n - 1)] == 1.0f);
  }
  // And the raw form the GEMM's packing buffers use.
  void* p = system_allocate(size_t{5} << 20);
  REQUIRE(p != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(p) % (uintptr_t{2} << 20) == 0);
  system_free(p, size_t{5} << 20);
}

TEST_CASE("allocator: gradients are charged to the gradient category") {
  const Device dev("cpu:45");
  Tensor w;
  {
    MemoryCategoryGuard cat(MemoryCategory::kParameter);
    w = Tensor::full(Shape{8}, 1.0, DType::kFloat32, dev);
  }
  w.set_requires_grad(true);
  Tensor w2 = w.detach();
  (void)w2;
  // y = sum(w * w) without ops: use the engine through a to_device round trip.
  Tensor y = w.to(Device("cpu:46"));
  backward({y}, {Tensor::full(Shape{8}, 1.0, DType::kFloat32, Device("cpu:46"))});
  REQUIRE(w.grad().defined());
  CHECK(allocator_for(dev).stats().live_bytes(MemoryCategory::kGradient) == 32);
  CHECK(w.grad().device() == dev);
}

TEST_CASE("allocator: out of memory is a gpipe::Error naming the device") {
  // 2^48 bytes: more than any machine holds, refused before the system allocator is asked
  // (so also under AddressSanitizer, which would abort on such a request).
  CHECK_THROWS_WITH(
      Tensor::empty(Shape{int64_t(1) << 46}, DType::kFloat32, Device("cpu:47")),
      Catch::Contains("out of memory on cpu:47") && Catch::Contains("physical memory"));
  CHECK(allocator_for(Device("cpu:47")).stats().live_bytes(MemoryCategory::kActivation) == 0);
}

// Note [Caching CPU allocator] in core/allocator.cc.
TEST_CASE(
    "allocator: freed CPU blocks are reused, statistics count what was asked, release empties the "
    "cache") {
  const Device dev("cpu:48");
  Allocator& a = allocator_for(dev);
  [[maybe_unused]] const void* first = nullptr;  // read only where the cache is on
  {
    Tensor x =
        Tensor::empty(Shape{1000, 1000}, DType::kFloat32, dev);  // 4 MB: an mmap without a cache
    first = x.raw_data();
    CHECK(a.stats().live_total == 4000000);
  }
  CHECK(a.stats().live_total == 0);
#if !defined(__SANITIZE_ADDRESS__)  // (caching is off under ASan, so use-after-free stays visible)
  const int64_t cached = a.stats().cached_bytes;
  CHECK(cached >= 4000000);
  CHECK(cached <= 4000000 * 5 / 4);  // at most 25% slack per size class
  {
    // The same size class (a slightly different request) gets the same block back.
    Tensor y = Tensor::empty(Shape{999, 1001}, DType::kFloat32, dev);
    CHECK(y.raw_data() == first);
    CHECK(a.stats().live_total == 999 * 1001 * 4);  // the request, not the class
    CHECK(a.stats().cached_bytes == 0);
    // A different class does not.
    Tensor z = Tensor::empty(Shape{100}, DType::kFloat32, dev);
    CHECK(z.raw_data() != first);
  }
  CHECK(a.stats().peak_total == 999 * 1001 * 4 + 400);  // peaks are of requested bytes too
  CHECK(a.stats().cached_bytes > 0);
  CHECK(release_cached_memory() >= cached);
#endif
  CHECK(a.stats().cached_bytes == 0);
  CHECK(a.stats().live_total == 0);
}
