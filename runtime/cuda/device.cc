// Device bookkeeping. Per-device state (streams, handles, properties) is made
// lazily under one mutex and never destroyed: tensors and worker threads may
// outlive static destruction, and destroying CUDA objects after the runtime
// has unloaded fails.
#include "runtime/cuda/device.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/cuda/check.h"

namespace gpipe::cuda {
namespace {

struct PerDevice {
  cudaStream_t compute = nullptr;
  cudaStream_t copy = nullptr;
  std::unique_ptr<cudaDeviceProp> props;
  std::mutex cublas_mu, cudnn_mu;
  cublasHandle_t cublas = nullptr;
  cudnnHandle_t cudnn = nullptr;
  std::vector<int> peer;  // per other device: -1 unknown, 0 no, 1 enabled
};

struct Devices {
  std::once_flag counted;
  int count = 0;
  cudaError_t count_status = cudaSuccess;
  std::mutex mu;
  std::vector<std::unique_ptr<PerDevice>> per;
};

Devices& devices() {
  static Devices* d = new Devices;  // never destroyed (see the file comment)
  return *d;
}

PerDevice& per_device(int index) {
  check_device(index);
  Devices& d = devices();
  std::lock_guard<std::mutex> lock(d.mu);
  if (d.per.empty()) {
    d.per.resize(d.count);
    for (auto& p : d.per) {
      p = std::make_unique<PerDevice>();
      p->peer.assign(d.count, -1);
    }
  }
  return *d.per[index];
}

std::atomic<bool> g_allow_tf32{false};

}  // namespace

int device_count() {
  Devices& d = devices();
  std::call_once(d.counted, [&] {
    int n = 0;
    d.count_status = cudaGetDeviceCount(&n);
    if (d.count_status != cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;
    }
    d.count = n;
  });
  return d.count;
}

void check_device(int index) {
  const int n = device_count();
  if (n == 0) {
    const cudaError_t s = devices().count_status;
    throw Error(detail::concat(
        "cuda:", index, " is not available: no CUDA device found (cudaGetDeviceCount: ",
        s == cudaSuccess ? "0 devices"
                         : detail::concat(cudaGetErrorName(s), ", ", cudaGetErrorString(s)),
        ")"));
  }
  GPIPE_CHECK(index >= 0 && index < n, "cuda:", index, " is not available: this machine has ", n,
              " CUDA device", n == 1 ? "" : "s", " (cuda:0 .. cuda:", n - 1, ")");
}

DeviceGuard::DeviceGuard(int index) {
  check_device(index);
  GPIPE_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != index) GPIPE_CUDA_CHECK(cudaSetDevice(index));
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
}

cudaStream_t compute_stream(int index) {
  PerDevice& p = per_device(index);
  std::lock_guard<std::mutex> lock(devices().mu);
  if (p.compute == nullptr) {
    DeviceGuard guard(index);
    GPIPE_CUDA_CHECK(cudaStreamCreateWithFlags(&p.compute, cudaStreamNonBlocking));
  }
  return p.compute;
}

cudaStream_t copy_stream(int index) {
  PerDevice& p = per_device(index);
  std::lock_guard<std::mutex> lock(devices().mu);
  if (p.copy == nullptr) {
    DeviceGuard guard(index);
    GPIPE_CUDA_CHECK(cudaStreamCreateWithFlags(&p.copy, cudaStreamNonBlocking));
  }
  return p.copy;
}

void synchronize(int index) {
  DeviceGuard guard(index);
  GPIPE_CUDA_CHECK(cudaStreamSynchronize(compute_stream(index)));
  GPIPE_CUDA_CHECK(cudaStreamSynchronize(copy_stream(index)));
}

bool enable_peer_access(int from, int to) {
  if (from == to) return true;
  PerDevice& p = per_device(from);
  check_device(to);
  std::lock_guard<std::mutex> lock(devices().mu);
  int& state = p.peer[to];
  if (state < 0) {
    int can = 0;
    GPIPE_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, from, to));
    if (can) {
      DeviceGuard guard(from);
      const cudaError_t s = cudaDeviceEnablePeerAccess(to, 0);
      if (s == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
      } else if (s != cudaSuccess) {
        (void)cudaGetLastError();
        can = 0;  // e.g. too many peers: fall back to staging through host memory
      }
    }
    state = can ? 1 : 0;
  }
  return state == 1;
}

void set_allow_tf32(bool on) { g_allow_tf32.store(on); }
bool allow_tf32() { return g_allow_tf32.load(); }

const cudaDeviceProp& device_properties(int index) {
  PerDevice& p = per_device(index);
  std::lock_guard<std::mutex> lock(devices().mu);
  if (!p.props) {
    auto props = std::make_unique<cudaDeviceProp>();
    GPIPE_CUDA_CHECK(cudaGetDeviceProperties(props.get(), index));
    p.props = std::move(props);
  }
  return *p.props;
}

HandleLease<cublasHandle_t> cublas_handle(int index) {
  PerDevice& p = per_device(index);
  const cudaStream_t stream = compute_stream(index);
  std::unique_lock<std::mutex> lock(p.cublas_mu);
  if (p.cublas == nullptr) {
    DeviceGuard guard(index);
    GPIPE_CUBLAS_CHECK(cublasCreate(&p.cublas));
    GPIPE_CUBLAS_CHECK(cublasSetStream(p.cublas, stream));
  }
  return HandleLease<cublasHandle_t>(std::move(lock), p.cublas);
}

HandleLease<cudnnHandle_t> cudnn_handle(int index) {
  PerDevice& p = per_device(index);
  const cudaStream_t stream = compute_stream(index);
  std::unique_lock<std::mutex> lock(p.cudnn_mu);
  if (p.cudnn == nullptr) {
    DeviceGuard guard(index);
    GPIPE_CUDNN_CHECK(cudnnCreate(&p.cudnn));
    GPIPE_CUDNN_CHECK(cudnnSetStream(p.cudnn, stream));
  }
  return HandleLease<cudnnHandle_t>(std::move(lock), p.cudnn);
}

}  // namespace gpipe::cuda
