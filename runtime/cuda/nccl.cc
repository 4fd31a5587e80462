#include "runtime/cuda/nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "core/autograd.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device.h"

namespace gpipe::cuda {
namespace {

using Clock = std::chrono::steady_clock;

// One NCCL communicator with a stream of its own. Shared by the links that
// use it; once aborted (a timeout or an asynchronous error) nobody may use
// or destroy it again.
struct ChannelState {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool aborted = false;
  ~ChannelState() {
    if (comm && !aborted) ncclCommDestroy(comm);
    if (stream) cudaStreamDestroy(stream);
  }
};
using Channel = std::shared_ptr<ChannelState>;

void require_usable(const ChannelState& c, const std::string& what) {
  GPIPE_CHECK(!c.aborted, what, ": the NCCL communicator was aborted after an earlier failure");
}

// Waits for `done()` (a non-blocking query) until `timeout`, aborting the
// channel's communicator and throwing when it passes or NCCL reports an
// asynchronous error.
template <class Done>
void wait_for(Done done, ChannelState& ch, double timeout, const std::string& what) {
  require_usable(ch, what);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout));
  auto pause = std::chrono::microseconds(2);
  while (!done()) {
    ncclResult_t async = ncclSuccess;
    GPIPE_NCCL_CHECK(ncclCommGetAsyncError(ch.comm, &async));
    const bool failed = async != ncclSuccess && async != ncclInProgress;
    if (failed || Clock::now() > deadline) {
      ncclCommAbort(ch.comm);
      ch.aborted = true;
      if (failed)
        throw Error(detail::concat("NCCL failed while waiting for ", what, ": ",
                                   ncclGetErrorString(async)));
      throw Error(detail::concat("timed out after ", timeout, " s waiting for ", what,
                                 " (is a rank stuck or dead? raise --timeout for slow steps)"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(500));
  }
}

// The communicator is non-blocking (set up in the background, with a
// deadline): a call may return ncclInProgress while NCCL still enqueues its
// work, which must be finished before events or stream queries mean anything.
void issued(ncclResult_t r, ChannelState& ch, double timeout, const std::string& what) {
  if (r != ncclSuccess && r != ncclInProgress) GPIPE_NCCL_CHECK(r);
  wait_for(
      [&] {
        ncclResult_t state = ncclInProgress;
        GPIPE_NCCL_CHECK(ncclCommGetAsyncError(ch.comm, &state));
        if (state != ncclSuccess && state != ncclInProgress) GPIPE_NCCL_CHECK(state);
        return state != ncclInProgress;
      },
      ch, timeout, what);
}

// ncclGroupStart .. ncclGroupEnd, closed also when a call inside throws.
class Group {
 public:
  Group() { GPIPE_NCCL_CHECK(ncclGroupStart()); }
  ~Group() {
    if (open_) ncclGroupEnd();
  }
  ncclResult_t end() {
    open_ = false;
    return ncclGroupEnd();
  }

 private:
  bool open_ = true;
};

void wait_stream(cudaStream_t s, ChannelState& ch, double timeout, const std::string& what) {
  wait_for(
      [&] {
        const cudaError_t e = cudaStreamQuery(s);
        if (e == cudaErrorNotReady) return false;
        GPIPE_CUDA_CHECK(e);
        return true;
      },
      ch, timeout, what);
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kFloat16:
      return ncclFloat16;
  }
  return ncclUint8;
}

Channel make_channel(Communicator& base, int device, double timeout) {
  DeviceGuard guard(device);
  ncclUniqueId id;
  if (base.rank() == 0) GPIPE_NCCL_CHECK(ncclGetUniqueId(&id));
  std::string bytes(reinterpret_cast<const char*>(&id), sizeof(id));
  base.broadcast(bytes, 0, "sharing the NCCL unique id");
  std::memcpy(&id, bytes.data(), sizeof(id));
  auto c = std::make_shared<ChannelState>();
  GPIPE_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // initialise in the background; we poll with a deadline
  const ncclResult_t r = ncclCommInitRankConfig(&c->comm, base.size(), id, base.rank(), &config);
  issued(r, *c, timeout, "every rank to join the NCCL communicator");
  return c;
}

// A CUDA event, destroyed however the scope is left.
class Event {
 public:
  Event() { GPIPE_CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming)); }
  ~Event() {
    if (e_) cudaEventDestroy(e_);
  }
  Event(Event&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
  Event& operator=(Event&& o) noexcept {
    std::swap(e_, o.e_);
    return *this;
  }
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// The stage's compute work so far must finish before a send reads its tensors.
void after_compute(int device, cudaStream_t s) {
  Event e;
  GPIPE_CUDA_CHECK(cudaEventRecord(e.get(), compute_stream(device)));
  GPIPE_CUDA_CHECK(cudaStreamWaitEvent(s, e.get(), 0));
}

// The header travels over MPI as one int64 tensor: [length, bytes...].
Message header_message(const std::string& header) {
  std::vector<int64_t> words(1 + (header.size() + 7) / 8, 0);
  words[0] = static_cast<int64_t>(header.size());
  std::memcpy(words.data() + 1, header.data(), header.size());
  Message m;
  m.tensors = {Tensor::from_vector(words, Shape{static_cast<int64_t>(words.size())})};
  m.requires_grad = {false};
  return m;
}

std::string header_of(const Message& m) {
  GPIPE_CHECK(m.tensors.size() == 1 && m.tensors[0].dtype() == DType::kInt64,
              "NCCL link: malformed header message");
  const std::vector<int64_t> words = m.tensors[0].to_vector<int64_t>();
  GPIPE_CHECK(
      !words.empty() && words[0] >= 0 && static_cast<size_t>(words[0]) <= (words.size() - 1) * 8,
      "NCCL link: malformed header length");
  return std::string(reinterpret_cast<const char*>(words.data() + 1),
                     static_cast<size_t>(words[0]));
}

class NcclTransport final : public Transport {
 public:
  NcclTransport(std::unique_ptr<Transport> headers, Channel channel, int peer, Device device,
                std::string name, double timeout)
      : headers_(std::move(headers)),
        ch_(channel),
        peer_(peer),
        device_(device),
        name_(std::move(name)),
        timeout_(timeout) {}
  ~NcclTransport() override {
    // After a timeout, or while an exception unwinds (the job is about to be
    // aborted), the neighbour may never take the sends: do not wait for it.
    if (ch_->aborted || std::uncaught_exceptions() > 0) {
      // The sends will never complete: leave their tensors to the dying process.
      for (Pending& p : pending_) new Bundle(std::move(p.tensors));
      return;
    }
    try {
      flush(std::chrono::duration<double>(timeout_));
    } catch (...) {
      // The job is failing; the process ends next.
    }
  }

  void send(int m, Message msg) override {
    DeviceGuard guard(device_.index);
    NoGradGuard no_grad;
    for (Tensor& t : msg.tensors)
      if (t.defined()) t = (t.device() == device_ ? t : t.to(device_)).contiguous().detach();
    require_usable(*ch_, name_);
    headers_->send(m, header_message(encode_header(msg)));
    after_compute(device_.index, ch_->stream);
    int64_t bytes = 0;
    {
      Group group;
      for (const Tensor& t : msg.tensors) {
        if (!t.defined() || t.numel() == 0) continue;
        const ncclResult_t r =
            ncclSend(t.raw_data(), t.numel(), nccl_type(t.dtype()), peer_, ch_->comm, ch_->stream);
        if (r != ncclSuccess && r != ncclInProgress) GPIPE_NCCL_CHECK(r);
        bytes += static_cast<int64_t>(t.nbytes());
      }
      issued(group.end(), *ch_, timeout_, name_ + ": queueing a send");
    }
    Event done;
    GPIPE_CUDA_CHECK(cudaEventRecord(done.get(), ch_->stream));
    pending_.push_back({std::move(msg.tensors), std::move(done)});
    bytes_sent_ += bytes;
    ++messages_sent_;
    reap();
  }

  Message receive(int m, std::chrono::duration<double> timeout) override {
    const std::string header = header_of(headers_->receive(m, timeout));
    DeviceGuard guard(device_.index);
    require_usable(*ch_, name_);
    Message msg = decode_header(header, device_);
    {
      Group group;
      for (Tensor& t : msg.tensors)
        if (t.defined() && t.numel() > 0) {
          const ncclResult_t r = ncclRecv(t.raw_data(), t.numel(), nccl_type(t.dtype()), peer_,
                                          ch_->comm, ch_->stream);
          if (r != ncclSuccess && r != ncclInProgress) GPIPE_NCCL_CHECK(r);
        }
      issued(group.end(), *ch_, timeout.count(), name_ + ": queueing a receive");
    }
    wait_stream(ch_->stream, *ch_, timeout.count(), detail::concat(name_, ", micro-batch ", m));
    return msg;
  }

  void abort() override { headers_->abort(); }
  void reset() override { headers_->reset(); }
  void flush(std::chrono::duration<double> timeout) override {
    headers_->flush(timeout);
    wait_for(
        [&] {
          reap();
          return pending_.empty();
        },
        *ch_, timeout.count(), name_ + ": the neighbour to take the sent messages");
  }
  const std::string& name() const override { return name_; }
  const char* kind() const override { return "nccl"; }

 private:
  struct Pending {
    Bundle tensors;  // alive until the send completes
    Event done;
  };
  void reap() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      const cudaError_t e = cudaEventQuery(it->done.get());
      if (e == cudaErrorNotReady) {
        ++it;
        continue;
      }
      GPIPE_CUDA_CHECK(e);
      it = pending_.erase(it);
    }
  }

  std::unique_ptr<Transport> headers_;
  Channel ch_;
  int peer_;
  Device device_;
  std::string name_;
  double timeout_;
  std::vector<Pending> pending_;
};

class NcclCommunicator final : public Communicator {
 public:
  static constexpr int kChannels = kTransportChannels;  // the pipeline's (runtime/communicator.h)

  NcclCommunicator(std::shared_ptr<Communicator> base, Device device)
      : base_(std::move(base)), device_(device) {
    check_device(device.index);
    set_timeout(base_->timeout());
    collective_ = make_channel(*base_, device.index, timeout_);
    for (int c = 0; c < kChannels; ++c)
      channels_.push_back(make_channel(*base_, device.index, timeout_));
  }
  ~NcclCommunicator() override =
      default;  // each ChannelState frees itself once its last user is gone

  int rank() const override { return base_->rank(); }
  int size() const override { return base_->size(); }
  int world_rank() const override { return base_->world_rank(); }
  int local_size() const override { return base_->local_size(); }
  void allreduce(double* d, int64_t n, ReduceOp op, const char* what) override {
    base_->allreduce(d, n, op, what);
  }
  void allreduce(float* d, int64_t n, ReduceOp op, const char* what) override {
    base_->allreduce(d, n, op, what);
  }

  void allreduce_sum(Tensor& t, const char* what) override {
    if (!t.device().is_cuda()) return base_->allreduce_sum(t, what);
    GPIPE_CHECK(t.is_contiguous(), what, ": allreduce needs a contiguous tensor");
    DeviceGuard guard(t.device().index);
    require_usable(*collective_, what);
    after_compute(t.device().index, collective_->stream);
    issued(ncclAllReduce(t.raw_data(), t.raw_data(), t.numel(), nccl_type(t.dtype()), ncclSum,
                         collective_->comm, collective_->stream),
           *collective_, timeout_, what);
    wait_stream(collective_->stream, *collective_, timeout_, what);
  }

  void broadcast(std::string& bytes, int root, const char* what) override {
    base_->broadcast(bytes, root, what);
  }
  std::vector<std::string> allgather(const std::string& mine, const char* what) override {
    return base_->allgather(mine, what);
  }
  void barrier(const char* what) override { base_->barrier(what); }
  std::shared_ptr<Communicator> split(int color, int key) override {
    return std::make_shared<NcclCommunicator>(base_->split(color, key), device_);
  }
  std::unique_ptr<Transport> transport(int peer, int channel, Device device,
                                       std::string name) override {
    if (!device.is_cuda()) return base_->transport(peer, channel, device, std::move(name));
    GPIPE_CHECK(channel >= 0 && channel < kChannels, "NCCL transport: channel ", channel,
                " out of range [0, ", kChannels, ")");
    auto headers = base_->transport(peer, channel, kCpu, name + " (headers)");
    return std::make_unique<NcclTransport>(std::move(headers), channels_[channel], peer, device,
                                           std::move(name), timeout_);
  }
  [[noreturn]] void abort(int code) override {
    base_->abort(code);
    std::_Exit(code);  // not reached
  }
  // Waits inside the host communicator (headers, small sums) wake with it;
  // a wait inside an NCCL kernel does not.
  void cancel() override { base_->cancel(); }
  void resume() override { base_->resume(); }

 private:
  std::shared_ptr<Communicator> base_;
  Device device_;
  Channel collective_;
  std::vector<Channel> channels_;
};

// NCCL takes one rank per GPU. Processes that share one (mpirun -np 2 with
// every stage on cuda:0) keep the base communicator: their links and sums
// are staged through host memory, as on CPUs. Collective over `base`.
std::shared_ptr<Communicator> make(std::shared_ptr<Communicator> base, Device device) {
  check_device(device.index);
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  char bus[64] = "";
  GPIPE_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), device.index));
  const std::string mine = std::string(host) + "/" + bus;
  const std::vector<std::string> all = base->allgather(mine, "comparing the ranks' GPUs");
  bool shared = false;
  for (size_t i = 0; i < all.size() && !shared; ++i)
    for (size_t j = i + 1; j < all.size() && !shared; ++j) shared = all[i] == all[j];
  if (!shared) return nccl_communicator(std::move(base), device);
  if (base->rank() == 0)
    std::fprintf(stderr,
                 "note: several ranks share a GPU; NCCL takes one rank per GPU, so the links "
                 "and gradient sums of this job go through host memory\n");
  return base;
}

[[maybe_unused]] const bool g_registered = [] {
  register_device_communicator(DeviceType::kCUDA, &make);
  return true;
}();

}  // namespace

std::shared_ptr<Communicator> nccl_communicator(std::shared_ptr<Communicator> base, Device device) {
  GPIPE_CHECK(device.is_cuda(), "nccl_communicator: expected a cuda device, got ", device);
  return std::make_shared<NcclCommunicator>(std::move(base), device);
}

}  // namespace gpipe::cuda
