// CUDA devices: counting, selection, per-device streams and library handles.
//
// Every device gets two streams, created on first use and kept for the life
// of the process:
//  - the compute stream: every kernel, library call and same-device copy on
//    the device's tensors is queued on it, so ops are ordered among
//    themselves without any synchronisation;
//  - the copy stream: transfers between two GPUs, which overlap compute and
//    are fenced against both devices' compute streams with events (see
//    runtime/cuda/copy.cc).
// cuBLAS and cuDNN handles are per device, bound to its compute stream, and
// used under a per-device lock (HandleLease), so any thread may launch work
// on any device.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn_graph.h>

#include <mutex>

namespace gpipe::cuda {

// Number of CUDA devices; 0 when there is no GPU or no usable driver. Never throws.
int device_count();

// Throws gpipe::Error unless cuda:index exists, e.g.
//   "cuda:0 is not available: no CUDA device found (cudaGetDeviceCount: ...)"
//   "cuda:3 is not available: this machine has 2 CUDA devices (cuda:0 .. cuda:1)"
void check_device(int index);

// Makes cuda:index the calling thread's current device while alive.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

cudaStream_t compute_stream(int index);
cudaStream_t copy_stream(int index);
// Blocks the calling thread until all work queued on cuda:index has finished.
void synchronize(int index);

// True if cuda:from can address cuda:to's memory directly; enables peer
// access (once) when the hardware allows it.
bool enable_peer_access(int from, int to);

// TensorFloat-32 for float32 GEMMs (cuBLAS) and convolutions (cuDNN). Off by
// default, so float32 results stay within ~1e-5 relative of the CPU's.
void set_allow_tf32(bool on);
bool allow_tf32();

const cudaDeviceProp& device_properties(int index);

// Exclusive use of one device's library handle while alive.
template <class Handle>
class HandleLease {
 public:
  HandleLease(std::unique_lock<std::mutex> lock, Handle handle)
      : lock_(std::move(lock)), handle_(handle) {}
  Handle get() const { return handle_; }

 private:
  std::unique_lock<std::mutex> lock_;
  Handle handle_;
};

HandleLease<cublasHandle_t> cublas_handle(int index);
HandleLease<cudnnHandle_t> cudnn_handle(int index);

}  // namespace gpipe::cuda
