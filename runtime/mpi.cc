#include "runtime/mpi.h"

#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/autograd.h"

namespace gpipe::mpi {
namespace {

using Clock = std::chrono::steady_clock;

// Every MPI call in this process holds this mutex (MPI_THREAD_SERIALIZED).
std::mutex& mpi_mutex() {
  static std::mutex mu;
  return mu;
}

// Set when a wait timed out. A timed-out request still owns its buffers, so
// from then on this process makes no MPI call that could progress it into
// freed memory (it is about to end the job: tools/gpipe_train.cc).
std::atomic<bool> g_broken{false};

void check_usable(const std::string& what) {
  if (g_broken.load())
    throw Error(detail::concat(what, ": MPI is unusable after an earlier timeout in this process"));
}

// The largest tag (MPI guarantees at least 32767).
int tag_limit() {
  static const int limit = [] {
    int flag = 0;
    int* value = nullptr;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &flag);
    return flag && value ? *value : 32767;
  }();
  return limit;
}

// Micro-batch m's tag, wrapped into [0, MPI_TAG_UB] (computed in 64 bits:
// MPI_TAG_UB is often INT_MAX, and INT_MAX + 1 overflows an int).
int wrap_tag(int m) { return static_cast<int>(m % (static_cast<int64_t>(tag_limit()) + 1)); }

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(detail::concat(call, " failed: ", std::string(text, len)));
}

// Polls `done()` (which makes one MPI call under the mutex) until it returns
// true; sleeps a little longer each time (up to `max_pause`) so a waiting
// rank does not steal its neighbour's core; throws after `timeout` with
// `what_waited`.
template <class Done, class What>
void poll_until(Done done, std::chrono::duration<double> timeout, What what_waited,
                const std::atomic<bool>* aborted = nullptr,
                std::chrono::microseconds max_pause = std::chrono::microseconds(500)) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  auto pause = std::chrono::microseconds(2);
  while (true) {
    check_usable(what_waited());
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      if (done()) return;
    }
    if (aborted && aborted->load()) throw Aborted(detail::concat(what_waited(), ": aborted"));
    if (Clock::now() > deadline) {
      g_broken = true;
      throw Error(detail::concat("timed out after ", timeout.count(), " s waiting for ",
                                 what_waited(),
                                 " (is a rank stuck or dead? raise --timeout for slow steps)"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, max_pause);
  }
}

// A non-blocking collective advances only inside MPI calls, one round per
// call, so it is polled often (a large all-reduce has many rounds).
void wait_request(MPI_Request* req, double timeout, const std::string& what) {
  poll_until(
      [&] {
        int flag = 0;
        check(MPI_Test(req, &flag, MPI_STATUS_IGNORE), "MPI_Test");
        return flag != 0;
      },
      std::chrono::duration<double>(timeout), [&] { return what; }, nullptr,
      std::chrono::microseconds(10));
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
  }
  return MPI_SUM;
}

constexpr int kMaxChunk = 1 << 30;  // bytes per MPI message (counts are int)

struct Finalizer {
  ~Finalizer() {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized) MPI_Finalize();
  }
};

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
    if (g_broken.load() || std::uncaught_exceptions() > 0) {
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
    while (!stop_ && !g_broken.load()) {
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
        g_broken = true;
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

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    check(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_), "MPI_Comm_rank");
    MPI_Comm local;
    check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
    check(MPI_Comm_size(local, &local_size_), "MPI_Comm_size");
    MPI_Comm_free(&local);
    // One duplicate per transport channel (collective: every member builds
    // this communicator at the same point), so links never share tags.
    for (MPI_Comm& c : channels_) check(MPI_Comm_dup(comm_, &c), "MPI_Comm_dup");
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      for (MPI_Comm& c : channels_) MPI_Comm_free(&c);
      if (owned_) MPI_Comm_free(&comm_);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank() const override { return world_rank_; }
  int local_size() const override { return local_size_; }

  void allreduce(double* data, int64_t n, ReduceOp op, const char* what) override {
    allreduce_impl(data, n, MPI_DOUBLE, op, what);
  }
  void allreduce(float* data, int64_t n, ReduceOp op, const char* what) override {
    allreduce_impl(data, n, MPI_FLOAT, op, what);
  }

  void broadcast(std::string& bytes, int root, const char* what) override {
    uint64_t n = bytes.size();
    collective([&](MPI_Request* r) { return MPI_Ibcast(&n, 1, MPI_UINT64_T, root, comm_, r); },
               what);
    bytes.resize(n);
    for (uint64_t off = 0; off < n; off += kMaxChunk) {
      const int len = static_cast<int>(std::min<uint64_t>(kMaxChunk, n - off));
      collective(
          [&](MPI_Request* r) {
            return MPI_Ibcast(bytes.data() + off, len, MPI_BYTE, root, comm_, r);
          },
          what);
    }
  }

  std::vector<std::string> allgather(const std::string& mine, const char* what) override {
    std::vector<int> sizes(size_);
    int my = static_cast<int>(mine.size());
    collective(
        [&](MPI_Request* r) {
          return MPI_Iallgather(&my, 1, MPI_INT, sizes.data(), 1, MPI_INT, comm_, r);
        },
        what);
    std::vector<int> displs(size_, 0);
    for (int i = 1; i < size_; ++i) displs[i] = displs[i - 1] + sizes[i - 1];
    std::string all(static_cast<size_t>(displs.back() + sizes.back()), '\0');
    collective(
        [&](MPI_Request* r) {
          return MPI_Iallgatherv(mine.data(), my, MPI_BYTE, all.data(), sizes.data(), displs.data(),
                                 MPI_BYTE, comm_, r);
        },
        what);
    std::vector<std::string> out;
    for (int i = 0; i < size_; ++i) out.push_back(all.substr(displs[i], sizes[i]));
    return out;
  }

  void barrier(const char* what) override {
    collective([&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); }, what);
  }

  std::shared_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      check(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
    }
    auto c = std::make_shared<MpiCommunicator>(sub, /*owned=*/true);
    c->set_timeout(timeout_);
    return c;
  }

  std::unique_ptr<Transport> transport(int peer, int channel, Device device,
                                       std::string name) override {
    GPIPE_CHECK(peer >= 0 && peer < size_ && peer != rank_, "transport: bad peer ", peer, " (rank ",
                rank_, " of ", size_, ")");
    GPIPE_CHECK(channel >= 0 && channel < kChannels, "transport: channel ", channel,
                " out of range [0, ", kChannels, ")");
    return std::make_unique<MpiTransport>(channels_[channel], peer, device, std::move(name),
                                          timeout_);
  }

  [[noreturn]] void abort(int code) override { abort_job(code); }

 private:
  template <class Start>
  void collective(Start start, const char* what) {
    check_usable(what);
    MPI_Request req;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      check(start(&req), what);
    }
    wait_request(&req, timeout_, detail::concat(what, " with all ", size_, " ranks of its group"));
  }

  void allreduce_impl(void* data, int64_t n, MPI_Datatype type, ReduceOp op, const char* what) {
    const int elem = type == MPI_DOUBLE ? 8 : 4;
    for (int64_t off = 0; off < n; off += kMaxChunk / 8) {
      const int len = static_cast<int>(std::min<int64_t>(kMaxChunk / 8, n - off));
      char* p = static_cast<char*>(data) + off * elem;
      if (static_cast<int64_t>(len) * elem >= kBlockingReduceBytes) {
        // Note [Large all-reduces]: OpenMPI's blocking all-reduce (its tuned
        // algorithms) took half the time of MPI_Iallreduce on gradients of
        // tens of MB here. It cannot time out by itself; the pipeline's
        // watchdog ends the job when a step outlives its timeout.
        check_usable(what);
        std::lock_guard<std::mutex> lock(mpi_mutex());
        check(MPI_Allreduce(MPI_IN_PLACE, p, len, type, mpi_op(op), comm_), what);
        continue;
      }
      collective(
          [&](MPI_Request* r) {
            return MPI_Iallreduce(MPI_IN_PLACE, p, len, type, mpi_op(op), comm_, r);
          },
          what);
    }
  }

  static constexpr int kChannels = kTransportChannels;
  static constexpr int64_t kBlockingReduceBytes = 1 << 20;
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1, world_rank_ = 0, local_size_ = 1;
  MPI_Comm channels_[kChannels];
};

}  // namespace

bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

std::shared_ptr<Communicator> world() {
  static std::once_flag once;
  static std::shared_ptr<Communicator> w;
  std::call_once(once, [] {
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) {  // the host program started MPI: its thread level must do
      int provided = 0;
      MPI_Query_thread(&provided);
      GPIPE_CHECK(provided >= MPI_THREAD_SERIALIZED, "MPI was initialised with thread level ",
                  provided, "; gpipe needs MPI_THREAD_SERIALIZED or more (MPI_Init_thread)");
    } else {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      GPIPE_CHECK(provided >= MPI_THREAD_SERIALIZED, "this MPI library provides thread level ",
                  provided, ", gpipe needs MPI_THREAD_SERIALIZED");
      static Finalizer finalizer;
    }
    // Errors come back as codes, which check() turns into gpipe::Error.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    w = std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, /*owned=*/false);
  });
  return w;
}

bool initialized() {
  int inited = 0;
  MPI_Initialized(&inited);
  return inited != 0;
}

void abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  // Should MPI_Abort itself get stuck, leave anyway: a rank that exits
  // non-zero makes mpirun end the others too.
  std::thread([code] {
    std::this_thread::sleep_for(std::chrono::seconds(10));
    std::_Exit(code);
  }).detach();
  // No mutex: another thread may hold it in a poll; the job ends either way.
  if (initialized()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace gpipe::mpi
