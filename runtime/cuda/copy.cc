// Cross-device copies. Every path first makes the source contiguous on its
// own device (in its own dtype), moves bytes with one memcpy (or one staged
// series of them), and lets the destination device do any dtype conversion
// or scatter into a strided view: the expensive strided work never crosses
// the bus, and every memcpy is a single dense block.
#include "runtime/cuda/copy.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "core/autograd.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/copy_kernels.h"
#include "runtime/cuda/device.h"

namespace gpipe::cuda {
namespace {

// src's values as a contiguous tensor of `dtype` on src's device (src itself if it already is).
Tensor dense_as(const Tensor& src, DType dtype) {
  if (src.is_contiguous() && src.dtype() == dtype) return src;
  Tensor out = Tensor::empty(src.shape(), dtype, src.device());
  out.copy_from(src);  // same device: the CPU loop or copy_on_device
  return out;
}

// Where to land bytes of `dtype` for dst: dst itself if it is contiguous and
// of that dtype, else a contiguous temporary on dst's device.
Tensor landing_for(const Tensor& dst, DType dtype) {
  if (dst.is_contiguous() && dst.dtype() == dtype) return dst;
  return Tensor::empty(dst.shape(), dtype, dst.device());
}

// One reusable pinned host buffer: GPU-to-GPU copies without peer access
// go through it whole, host <-> device copies through its two halves.
struct PinnedStage {
  static constexpr size_t kBytes = size_t{32} << 20;
  static constexpr size_t kHalf = kBytes / 2;
  std::mutex mu;
  void* buffer = nullptr;
  char* half(size_t i) { return static_cast<char*>(buffer) + (i % 2) * kHalf; }
};

// The stage, allocated on first use (held by mu's owner).
PinnedStage& pinned_stage() {
  static PinnedStage* p = new PinnedStage;  // never freed (process lifetime)
  return *p;
}
void ensure_pinned(PinnedStage& stage) {
  if (stage.buffer == nullptr)
    GPIPE_CUDA_CHECK(cudaHostAlloc(&stage.buffer, PinnedStage::kBytes, cudaHostAllocPortable));
}

// Note [Pinned staging]. A copy between pageable host memory and a device
// of at least kStagedMin bytes (checkpoint save and load of device tensors,
// a model moved to its devices, predictions brought back) runs through the
// two halves of the pinned stage: the DMA engine moves one chunk while the
// CPU copies the previous one between pageable memory and the other half,
// so the transfer runs at pinned bandwidth less the host memcpy, instead of
// through the driver's own one-chunk-at-a-time staging. Events on the
// device's compute stream say when each half is free again; the copy keeps
// the stream order of a plain cudaMemcpyAsync (it starts after the
// stream's earlier work), and returns with the bytes in place (device to
// host) or queued with every host byte already consumed (host to device).
constexpr size_t kStagedMin = size_t{1} << 20;

// One staged copy's hold on the stage: its lock, two events for the
// halves (created on the copy's device), that device current, its stream.
struct StagedCopy {
  PinnedStage& stage = pinned_stage();
  std::lock_guard<std::mutex> lock{stage.mu};
  cudaEvent_t e[2] = {nullptr, nullptr};
  DeviceGuard guard;
  cudaStream_t stream;
  explicit StagedCopy(int device) : guard(device), stream(compute_stream(device)) {
    ensure_pinned(stage);
    for (cudaEvent_t& x : e) GPIPE_CUDA_CHECK(cudaEventCreateWithFlags(&x, cudaEventDisableTiming));
  }
  ~StagedCopy() {
    for (cudaEvent_t x : e)
      if (x != nullptr) cudaEventDestroy(x);  // best effort; recorded work completes anyway
  }
};

void staged_to_device(const char* from, char* to, size_t bytes, int device) {
  StagedCopy c(device);
  size_t i = 0;
  for (size_t off = 0; off < bytes; off += PinnedStage::kHalf, ++i) {
    const size_t len = std::min(PinnedStage::kHalf, bytes - off);
    if (i >= 2) GPIPE_CUDA_CHECK(cudaEventSynchronize(c.e[i % 2]));  // chunk i-2 has left it
    std::memcpy(c.stage.half(i), from + off, len);
    GPIPE_CUDA_CHECK(
        cudaMemcpyAsync(to + off, c.stage.half(i), len, cudaMemcpyHostToDevice, c.stream));
    GPIPE_CUDA_CHECK(cudaEventRecord(c.e[i % 2], c.stream));
  }
  // The stage is free for the next copy once both halves have left.
  for (size_t k = 0; k < std::min<size_t>(i, 2); ++k)
    GPIPE_CUDA_CHECK(cudaEventSynchronize(c.e[k]));
}

void staged_to_host(const char* from, char* to, size_t bytes, int device) {
  StagedCopy c(device);
  const size_t chunks = (bytes + PinnedStage::kHalf - 1) / PinnedStage::kHalf;
  auto drain = [&](size_t k) {  // chunk k has arrived in its half: copy it out
    const size_t off = k * PinnedStage::kHalf, len = std::min(PinnedStage::kHalf, bytes - off);
    GPIPE_CUDA_CHECK(cudaEventSynchronize(c.e[k % 2]));
    std::memcpy(to + off, c.stage.half(k), len);
  };
  for (size_t k = 0; k < chunks; ++k) {
    const size_t off = k * PinnedStage::kHalf, len = std::min(PinnedStage::kHalf, bytes - off);
    // Half k % 2 held chunk k-2, drained in the previous iteration.
    GPIPE_CUDA_CHECK(
        cudaMemcpyAsync(c.stage.half(k), from + off, len, cudaMemcpyDeviceToHost, c.stream));
    GPIPE_CUDA_CHECK(cudaEventRecord(c.e[k % 2], c.stream));
    if (k > 0) drain(k - 1);
  }
  if (chunks > 0) drain(chunks - 1);
}

void host_to_device(const Tensor& src, Tensor& dst) {
  const Tensor h =
      dense_as(src, dst.dtype());  // convert on the host: fewer bytes to move if narrowing
  Tensor d = landing_for(dst, dst.dtype());
  if (d.nbytes() >= kStagedMin) {
    staged_to_device(static_cast<const char*>(h.raw_data()), static_cast<char*>(d.raw_data()),
                     d.nbytes(), dst.device().index);
  } else {
    DeviceGuard guard(dst.device().index);
    // From pageable memory this returns once the bytes are staged: h may go away afterwards.
    GPIPE_CUDA_CHECK(cudaMemcpyAsync(d.raw_data(), h.raw_data(), d.nbytes(), cudaMemcpyHostToDevice,
                                     compute_stream(dst.device().index)));
  }
  if (!d.shares_storage_with(dst)) copy_on_device(d, dst);
}

void device_to_host(const Tensor& src, Tensor& dst) {
  const Tensor s = dense_as(src, src.dtype());
  Tensor h = landing_for(dst, src.dtype());
  const int i = src.device().index;
  if (s.nbytes() >= kStagedMin) {
    staged_to_host(static_cast<const char*>(s.raw_data()), static_cast<char*>(h.raw_data()),
                   s.nbytes(), i);
  } else {
    DeviceGuard guard(i);
    GPIPE_CUDA_CHECK(cudaMemcpyAsync(h.raw_data(), s.raw_data(), s.nbytes(), cudaMemcpyDeviceToHost,
                                     compute_stream(i)));
    GPIPE_CUDA_CHECK(cudaStreamSynchronize(compute_stream(i)));
  }
  if (!h.shares_storage_with(dst)) dst.copy_from(h);  // CPU: converts dtype / scatters
}

cudaEvent_t record_event(int device, cudaStream_t stream) {
  DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  GPIPE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  GPIPE_CUDA_CHECK(cudaEventRecord(e, stream));
  return e;
}

void peer_copy(const Tensor& s, Tensor& d) {
  const int i = s.device().index, j = d.device().index;
  const cudaStream_t copy = copy_stream(j);
  // The copy starts once s is written (i's compute stream) and d's earlier
  // readers are done (j's compute stream); j's compute stream waits for it.
  cudaEvent_t src_ready = record_event(i, compute_stream(i));
  cudaEvent_t dst_ready = record_event(j, compute_stream(j));
  DeviceGuard guard(j);
  GPIPE_CUDA_CHECK(cudaStreamWaitEvent(copy, src_ready, 0));
  GPIPE_CUDA_CHECK(cudaStreamWaitEvent(copy, dst_ready, 0));
  GPIPE_CUDA_CHECK(cudaMemcpyPeerAsync(d.raw_data(), j, s.raw_data(), i, s.nbytes(), copy));
  cudaEvent_t done = record_event(j, copy);
  GPIPE_CUDA_CHECK(cudaStreamWaitEvent(compute_stream(j), done, 0));
  // Destroying a recorded event is safe: its resources go once it completes.
  GPIPE_CUDA_CHECK(cudaEventDestroy(src_ready));
  GPIPE_CUDA_CHECK(cudaEventDestroy(dst_ready));
  GPIPE_CUDA_CHECK(cudaEventDestroy(done));
  // Neither block may be reused before the copy stream is done with it.
  record_stream(s.device(), s.storage()->data(), copy);
  record_stream(d.device(), d.storage()->data(), copy);
}

void staged_copy(const Tensor& s, Tensor& d) {
  const int i = s.device().index, j = d.device().index;
  PinnedStage& stage = pinned_stage();
  std::lock_guard<std::mutex> lock(stage.mu);
  ensure_pinned(stage);
  const char* from = static_cast<const char*>(s.raw_data());
  char* to = static_cast<char*>(d.raw_data());
  for (size_t off = 0; off < s.nbytes(); off += PinnedStage::kBytes) {
    const size_t len = std::min(PinnedStage::kBytes, s.nbytes() - off);
    {
      DeviceGuard guard(i);
      GPIPE_CUDA_CHECK(cudaMemcpyAsync(stage.buffer, from + off, len, cudaMemcpyDeviceToHost,
                                       compute_stream(i)));
      GPIPE_CUDA_CHECK(cudaStreamSynchronize(compute_stream(i)));
    }
    DeviceGuard guard(j);
    GPIPE_CUDA_CHECK(
        cudaMemcpyAsync(to + off, stage.buffer, len, cudaMemcpyHostToDevice, compute_stream(j)));
    GPIPE_CUDA_CHECK(cudaStreamSynchronize(compute_stream(j)));  // before the buffer is reused
  }
}

void device_to_device(const Tensor& src, Tensor& dst) {
  const Tensor s = dense_as(src, src.dtype());
  Tensor d = landing_for(dst, src.dtype());
  if (s.nbytes() > 0) {
    if (enable_peer_access(dst.device().index, src.device().index)) {
      peer_copy(s, d);
    } else {
      staged_copy(s, d);
    }
  }
  if (!d.shares_storage_with(dst)) copy_on_device(d, dst);
}

void fill_tensor(Tensor& dst, double value) { fill_on_device(dst, value); }

Tensor accumulate_tensors(const Tensor& a, const Tensor& b) { return add_on_device(a, b); }

[[maybe_unused]] const bool g_registered = [] {
  register_copy(DeviceType::kCUDA, &copy_tensor);
  register_fill(DeviceType::kCUDA, &fill_tensor);
  register_accumulate(DeviceType::kCUDA, &accumulate_tensors);
  return true;
}();

}  // namespace

void copy_tensor(const Tensor& src, Tensor& dst) {
  if (dst.numel() == 0) return;
  const Device from = src.device(), to = dst.device();
  if (from == to) {
    copy_on_device(src, dst);
  } else if (from.is_cpu()) {
    host_to_device(src, dst);
  } else if (to.is_cpu()) {
    device_to_host(src, dst);
  } else {
    device_to_device(src, dst);
  }
}

}  // namespace gpipe::cuda
