// The CUDA runtime on a real device (skipped without one, see
// gpu_test_main.cc): copies between cpu and cuda:i in every dtype, through
// strided views and with dtype conversion; fill; gradient accumulation; the
// caching allocator's statistics, reuse and per-stream rule; out-of-memory
// errors; GPU-to-GPU copies when a second device exists. Values must match
// exactly: nothing here does arithmetic except the float64 -> float32
// conversion, which must round the same way on both devices.
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "core/autograd.h"
#include "core/tensor.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device.h"

using Catch::Matchers::Contains;

namespace gpipe {
namespace {

const Device kGpu{DeviceType::kCUDA, 0};

// A CPU tensor 0.5 * i - 3 (exact in every dtype) of `dtype`.
Tensor ramp(const Shape& shape, DType dtype = DType::kFloat64) {
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = dtype == DType::kInt32 || dtype == DType::kInt64 ? static_cast<double>(i) - 3
                                                            : 0.5 * static_cast<double>(i) - 3;
  return Tensor::from_vector(v, shape).to(dtype);
}

// Transposed view of a rank-2 tensor (no copy).
Tensor transposed(const Tensor& t) {
  return Tensor::make_view(t, Shape{t.size(1), t.size(0)}, {t.strides()[1], t.strides()[0]},
                           t.offset());
}

TEST_CASE("cuda runtime: host -> device -> host keeps every value, in every dtype") {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64}) {
    INFO("dtype " << dt);
    const Tensor t = ramp(Shape{5, 7}, dt);
    const Tensor g = t.to(kGpu);
    CHECK(g.device() == kGpu);
    CHECK(g.dtype() == dt);
    CHECK(g.to_vector<double>() == t.to_vector<double>());
    CHECK(g.clone().to(kCpu).to_vector<double>() == t.to_vector<double>());
  }
  CHECK(Tensor::scalar(2.5).to(kGpu).item() == 2.5);
  CHECK(Tensor::empty(Shape{0, 3}, DType::kFloat32, kGpu).to(kCpu).numel() == 0);
}

TEST_CASE("cuda runtime: large copies staged through pinned memory keep every byte, both ways") {
  // Below 1 MiB a copy goes straight from pageable memory; from 1 MiB on
  // through the pinned stage's two 16 MiB halves (copy.cc, Note [Pinned
  // staging]): one chunk exactly, and several with an odd tail.
  for (int64_t n : {int64_t{(1 << 18) - 1}, int64_t{1 << 18}, int64_t{(1 << 22) * 5 / 2 + 12345}}) {
    INFO(n << " floats");
    const Tensor t = ramp(Shape{n}, DType::kFloat32);
    const Tensor g = t.to(kGpu);
    CHECK(g.to(kCpu).to_vector<float>() == t.to_vector<float>());
    Tensor into = Tensor::empty(Shape{n}, DType::kFloat32, kGpu);
    into.copy_from(t);
    Tensor back = Tensor::zeros(Shape{n}, DType::kFloat32);
    back.copy_from(into);
    CHECK(back.to_vector<float>() == t.to_vector<float>());
  }
  // Copies from several threads share the stage without mixing chunks.
  const Tensor a = ramp(Shape{int64_t{3} << 20}, DType::kFloat32);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back(
        [&, k] { ok[k] = a.to(kGpu).to(kCpu).to_vector<float>() == a.to_vector<float>(); });
  for (auto& th : threads) th.join();
  CHECK(ok == std::vector<int>(4, 1));
}

TEST_CASE("cuda runtime: strided views and dtype conversion on either side of a copy") {
  const Tensor a = ramp(Shape{4, 6});
  const Tensor at = transposed(a);  // non-contiguous CPU source
  const Tensor g = at.to(kGpu);
  REQUIRE(g.is_contiguous());
  CHECK(g.to_vector<double>() == at.to_vector<double>());

  const Tensor gt = transposed(a.to(kGpu));  // non-contiguous CUDA source
  CHECK(gt.contiguous().to_vector<double>() == at.to_vector<double>());
  CHECK(gt.to(kCpu).to_vector<double>() == at.to_vector<double>());

  const Tensor g32 = gt.to(DType::kFloat32);  // convert on the device
  CHECK(g32.dtype() == DType::kFloat32);
  CHECK(g32.to_vector<double>() == at.to(DType::kFloat32).to_vector<double>());

  Tensor dst = Tensor::zeros(Shape{6, 4}, DType::kFloat32, kGpu);
  Tensor rows = Tensor::make_view(dst, Shape{2, 4}, {4, 1}, 4);  // rows 1..2 of dst
  rows.copy_from(ramp(Shape{2, 4}, DType::kFloat64));            // float64 CPU -> float32 view
  const auto v = dst.to_vector<double>();
  const auto r = ramp(Shape{2, 4}).to_vector<double>();
  for (int i = 0; i < 24; ++i) CHECK(v[i] == (i >= 4 && i < 12 ? r[i - 4] : 0.0));

  Tensor cpu_dst = Tensor::zeros(Shape{4, 6}, DType::kInt64);
  Tensor cpu_view = transposed(cpu_dst);
  cpu_view.copy_from(ramp(Shape{6, 4}, DType::kInt32).to(kGpu));  // int32 CUDA -> int64 strided CPU
  CHECK(transposed(cpu_dst).to_vector<int64_t>() ==
        ramp(Shape{6, 4}, DType::kInt64).to_vector<int64_t>());
}

TEST_CASE("cuda runtime: fill, zeros and full on cuda tensors and views") {
  Tensor t = Tensor::full(Shape{3, 5}, 1.5, DType::kFloat64, kGpu);
  for (double x : t.to_vector<double>()) CHECK(x == 1.5);
  Tensor col = Tensor::make_view(t, Shape{3}, {5}, 2);  // column 2
  col.fill(-4.0);
  const auto v = t.to_vector<double>();
  for (int i = 0; i < 15; ++i) CHECK(v[i] == (i % 5 == 2 ? -4.0 : 1.5));
  for (int64_t x : Tensor::zeros(Shape{1000}, DType::kInt64, kGpu).to_vector<int64_t>())
    CHECK(x == 0);
}

TEST_CASE("cuda runtime: gradients of CUDA leaves accumulate on the device") {
  Tensor x = ramp(Shape{3, 4}).to(kGpu).detach();
  x.set_requires_grad(true);
  const Tensor a = x.to(kCpu), b = x.to(kCpu);  // two uses: the leaf's gradient is summed
  backward({a, b}, {Tensor::full(Shape{3, 4}, 1.0, DType::kFloat64),
                    Tensor::full(Shape{3, 4}, 2.0, DType::kFloat64)});
  REQUIRE(x.grad().defined());
  CHECK(x.grad().device() == kGpu);
  for (double g : x.grad().to_vector<double>()) CHECK(g == 3.0);

  const Tensor p = ramp(Shape{4, 3}).to(kGpu);
  const Tensor q = transposed(ramp(Shape{3, 4}).to(kGpu));  // strided operand
  const Tensor s = accumulate(p, q);
  const auto pv = p.to_vector<double>(), qv = q.to_vector<double>(), sv = s.to_vector<double>();
  for (size_t i = 0; i < sv.size(); ++i) CHECK(sv[i] == pv[i] + qv[i]);
}

TEST_CASE("cuda runtime: the caching allocator charges per category and reuses blocks") {
  Allocator& alloc = allocator_for(kGpu);
  const MemoryStats before = alloc.stats();
  {
    MemoryCategoryGuard category(MemoryCategory::kParameter);
    Tensor t = Tensor::empty(Shape{1000}, DType::kFloat32, kGpu);
    CHECK(alloc.stats().live_bytes(MemoryCategory::kParameter) -
              before.live_bytes(MemoryCategory::kParameter) ==
          4000);
  }
  CHECK(alloc.stats().live_bytes(MemoryCategory::kParameter) ==
        before.live_bytes(MemoryCategory::kParameter));
  const int64_t mallocs = cuda::cache_stats(0).cuda_mallocs;
  void* first = nullptr;
  {
    Tensor t = Tensor::empty(Shape{1000}, DType::kFloat32, kGpu);  // same size class: reused
    first = t.storage()->data();
  }
  {
    Tensor t = Tensor::empty(Shape{1010}, DType::kFloat32, kGpu);  // 4040 B: also the 4096 class
    CHECK(t.storage()->data() == first);
  }
  CHECK(cuda::cache_stats(0).cuda_mallocs == mallocs);
  CHECK(cuda::cache_stats(0).cached_bytes >= 4096);
  cuda::synchronize(0);
  cuda::empty_cache(0);
  CHECK(cuda::cache_stats(0).cached_bytes == 0);
}

void CUDART_CB sleep_200ms(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }

TEST_CASE("cuda runtime: a block used on another stream is not reused before that stream is done") {
  void* p = nullptr;
  const cudaStream_t other = cuda::copy_stream(0);
  {
    Tensor t = Tensor::empty(Shape{1 << 18}, DType::kFloat32, kGpu);
    p = t.storage()->data();
    cuda::DeviceGuard guard(0);
    GPIPE_CUDA_CHECK(cudaLaunchHostFunc(other, &sleep_200ms, nullptr));  // keeps `other` busy
    cuda::record_stream(kGpu, p, other);
  }  // freed while `other` may still be using it
  {
    Tensor t2 = Tensor::empty(Shape{1 << 18}, DType::kFloat32, kGpu);
    CHECK(t2.storage()->data() != p);
  }
  cuda::synchronize(0);
  Tensor a = Tensor::empty(Shape{1 << 18}, DType::kFloat32, kGpu);
  Tensor b = Tensor::empty(Shape{1 << 18}, DType::kFloat32, kGpu);
  CHECK((a.storage()->data() == p || b.storage()->data() == p));  // back in the pool once done
}

TEST_CASE("cuda runtime: running out of device memory is a gpipe::Error naming the device") {
  REQUIRE_THROWS_WITH(Tensor::empty(Shape{int64_t{1} << 46}, DType::kFloat32, kGpu),
                      Contains("out of memory on cuda:0"));
  // The allocator still works afterwards.
  CHECK(Tensor::full(Shape{4}, 1.0, DType::kFloat32, kGpu).to_vector<float>() ==
        std::vector<float>{1, 1, 1, 1});
}

TEST_CASE("cuda runtime: copies between two GPUs (peer access or staged through host memory)") {
  if (cuda::device_count() < 2) {
    WARN("one CUDA device: GPU-to-GPU copies not exercised");
    return;
  }
  const Device g1{DeviceType::kCUDA, 1};
  const Tensor src = ramp(Shape{300, 70}).to(kGpu);
  const Tensor on1 = src.to(g1);
  CHECK(on1.device() == g1);
  CHECK(on1.to_vector<double>() == src.to_vector<double>());
  const Tensor t = transposed(src).to(g1);  // strided source
  CHECK(t.to_vector<double>() == transposed(src).to_vector<double>());
  Tensor dst = Tensor::zeros(Shape{70, 300}, DType::kFloat32, g1);
  dst.copy_from(transposed(src));  // strided source, dtype conversion on the destination
  CHECK(dst.to_vector<double>() == transposed(src).to(DType::kFloat32).to_vector<double>());
  const Tensor back = on1.to(kGpu);  // and the other direction
  CHECK(back.to_vector<double>() == src.to_vector<double>());
  Tensor x = src.detach();
  x.set_requires_grad(true);
  x.to(g1).backward(Tensor::full(Shape{300, 70}, 1.0, DType::kFloat64, g1));
  CHECK(x.grad().device() == kGpu);
}

}  // namespace
}  // namespace gpipe
