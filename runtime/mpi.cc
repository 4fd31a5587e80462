// The job's processes as Communicators: MPI communicators whose collectives
// are non-blocking requests polled against the timeout (mpi_calls.h), and
// mpi::world(), which starts MPI once. The pipeline's boundaries between
// processes are in mpi_transport.cc.
#include "runtime/mpi.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/mpi_calls.h"

namespace gpipe::mpi {
namespace {

// The call discipline (mpi_calls.h).
using internal::check;
using internal::check_usable;
using internal::kMaxChunk;
using internal::make_transport;
using internal::mpi_mutex;
using internal::wait_request;

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

struct Finalizer {
  ~Finalizer() {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized) MPI_Finalize();
  }
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
    return make_transport(channels_[channel], peer, device, std::move(name), timeout_);
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
