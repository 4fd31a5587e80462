// MpiTransport: a pipeline boundary between two processes, sends posted
// without waiting and a progress thread that receives into a Mailbox.
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/autograd.h"
#include "runtime/mailbox.h"
#include "runtime/mpi_calls.h"

namespace gpipe::mpi::internal {
namespace {

// One direction of one boundary between two processes. The sending side
// posts non-blocking sends (header, then each tensor's bytes) and returns at
// once; the tensors stay alive here until the sends complete. The receiving
// side runs a progress thread that takes every message from the peer as
// soon as it arrives (header first, then the payloads straight into freshly
// allocated tensors) and leaves it in a Mailbox keyed by micro-batch, so the
// copy overlaps the stage's compute and receive() only waits for what has
// not arrived yet. Each channel has its own communicator, so the thread may
// take any tag from its peer.
class MpiTransport final : public Transport {
 public:
  MpiTransport(MPI_Comm comm, int peer, Device device, std::string name, double timeout)
      : comm_(comm),
        peer_(peer),
        device_(device),
        name_(std::move(name)),
        timeout_(timeout),
        box_(name_) {}
  ~MpiTransport() override {
    stop_ = true;
    if (receiver_.joinable()) receiver_.join();
    // After a timeout, or while an exception unwinds (the job is about to be
    // aborted), the neighbour may never take the sends: do not wait for it.
    if (broken() || std::uncaught_exceptions() > 0) {
      // Leave the unfinished sends (and their tensors) to the dying process.
      for (Pending& p : pending_) new Bundle(std::move(p.tensors));
      return;
    }
    try {
      flush(std::chrono::duration<double>(timeout_));
    } catch (...) {
      // A failed job is being torn down; the process exits next.
    }
  }

  void send(int m, Message msg) override {
    Pending p;
    {
      NoGradGuard no_grad;
      for (Tensor& t : msg.tensors)
        if (t.defined()) t = (t.device().is_cpu() ? t : t.to(kCpu)).contiguous().detach();
    }
    p.header = encode_header(msg);
    p.tensors = std::move(msg.tensors);
    const int tag = wrap_tag(m);
    check_usable(name_);
    std::lock_guard<std::mutex> lock(mpi_mutex());
    reap_locked();
    p.requests.emplace_back();
    check(MPI_Isend(p.header.data(), static_cast<int>(p.header.size()), MPI_BYTE, peer_, tag, comm_,
                    &p.requests.back()),
          "MPI_Isend");
    int64_t bytes = static_cast<int64_t>(p.header.size());
    for (const Tensor& t : p.tensors) {
      if (!t.defined()) continue;
      const char* data = static_cast<const char*>(t.raw_data());
      for (size_t off = 0; off < t.nbytes(); off += kMaxChunk) {
        p.requests.emplace_back();
        const int n = static_cast<int>(std::min<size_t>(kMaxChunk, t.nbytes() - off));
        check(MPI_Isend(data + off, n, MPI_BYTE, peer_, tag, comm_, &p.requests.back()),
              "MPI_Isend");
      }
      bytes += static_cast<int64_t>(t.nbytes());
    }
    pending_.push_back(std::move(p));
    bytes_sent_ += bytes;
    ++messages_sent_;
  }

  Message receive(int m, std::chrono::duration<double> timeout) override {
    std::call_once(started_, [this] { receiver_ = std::thread([this] { receive_loop(); }); });
    Message msg = box_.take(wrap_tag(m), timeout);
    if (!device_.is_cpu()) {  // staged through host memory
      NoGradGuard no_grad;
      for (Tensor& t : msg.tensors)
        if (t.defined()) t = t.to(device_);
    }
    return msg;
  }

  void abort() override { box_.abort(); }
  // Messages are kept: a neighbour that is a step ahead may already have sent the next step's.
  void reset() override { box_.clear_abort(); }

  void flush(std::chrono::duration<double> timeout) override {
    if (pending_.empty()) return;
    poll_until(
        [&] {
          reap_locked();
          return pending_.empty();
        },
        timeout,
        [&] {
          return detail::concat(name_, ": the neighbour to take ", pending_.size(),
                                " sent messages");
        });
  }

  const std::string& name() const override { return name_; }
  const char* kind() const override { return "mpi"; }

 private:
  struct Pending {
    std::string header;
    Bundle tensors;  // kept alive until the sends complete
    std::vector<MPI_Request> requests;
  };

  // The progress thread: every message from the peer into the mailbox.
  void receive_loop() {
    auto pause = std::chrono::microseconds(2);
    while (!stop_ && !broken()) {
      int flag = 0;
      MPI_Message handle;
      MPI_Status status;
      std::string header;
      try {
        {
          std::lock_guard<std::mutex> lock(mpi_mutex());
          check(MPI_Improbe(peer_, MPI_ANY_TAG, comm_, &flag, &handle, &status), "MPI_Improbe");
          if (flag) {
            int count = 0;
            check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
            header.resize(static_cast<size_t>(count));
            check(MPI_Mrecv(header.data(), count, MPI_BYTE, &handle, MPI_STATUS_IGNORE),
                  "MPI_Mrecv");
          }
        }
        if (!flag) {
          std::this_thread::sleep_for(pause);
          pause = std::min(pause * 2, std::chrono::microseconds(500));
          continue;
        }
        pause = std::chrono::microseconds(2);
        const int m = status.MPI_TAG;
        Message msg = decode_header(header, device_.is_cpu() ? device_ : kCpu);
        std::vector<MPI_Request> reqs;
        {
          std::lock_guard<std::mutex> lock(mpi_mutex());
          for (Tensor& t : msg.tensors) {
            if (!t.defined()) continue;
            char* data = static_cast<char*>(t.raw_data());
            for (size_t off = 0; off < t.nbytes(); off += kMaxChunk) {
              reqs.emplace_back();
              const int n = static_cast<int>(std::min<size_t>(kMaxChunk, t.nbytes() - off));
              check(MPI_Irecv(data + off, n, MPI_BYTE, peer_, m, comm_, &reqs.back()), "MPI_Irecv");
            }
          }
        }
        if (!reqs.empty())
          poll_until(
              [&] {
                int done = 0;
                check(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done,
                                  MPI_STATUSES_IGNORE),
                      "MPI_Testall");
                return done != 0;
              },
              std::chrono::duration<double>(timeout_),
              [&] { return detail::concat(name_, ", micro-batch ", m); }, &stop_);
        box_.put(m, std::move(msg));
      } catch (const std::exception& e) {
        // The waiting stage sees this as its failure (named by the mailbox).
        // A half-received message keeps its buffers: MPI may still write them.
        mark_broken();
        box_.fail(detail::concat(name_, ": receiving failed: ", e.what()));
        return;
      }
    }
  }

  // Drops the sends that have completed (mutex held).
  void reap_locked() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      int flag = 0;
      check(MPI_Testall(static_cast<int>(it->requests.size()), it->requests.data(), &flag,
                        MPI_STATUSES_IGNORE),
            "MPI_Testall");
      it = flag ? pending_.erase(it) : std::next(it);
    }
  }

  MPI_Comm comm_;
  int peer_;
  Device device_;
  std::string name_;
  double timeout_;
  std::vector<Pending> pending_;
  Mailbox box_;
  std::atomic<bool> stop_{false};
  std::once_flag started_;
  std::thread receiver_;
};

}  // namespace

std::unique_ptr<Transport> make_transport(MPI_Comm comm, int peer, Device device, std::string name,
                                          double timeout) {
  return std::make_unique<MpiTransport>(comm, peer, device, std::move(name), timeout);
}

}  // namespace gpipe::mpi::internal
