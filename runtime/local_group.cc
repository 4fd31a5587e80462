#include "runtime/local_group.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "core/autograd.h"
#include "runtime/mailbox.h"

namespace gpipe {

// One group's rendezvous: every collective is an exchange of one string per
// member, completed when all have arrived (generation counting).
struct LocalGroup::Shared {
  explicit Shared(int n) : size(n), slots(n), tensor_slots(n) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  bool cancelled = false;  // cancel(): waiters and newcomers throw Aborted until resume()
  std::vector<std::string> slots, done;
  // share_tensors(): beside the strings; the last member to take the
  // result drops the group's references to them.
  std::vector<Tensor> tensor_slots, tensors_done;
  int tensor_takers = 0;

  std::vector<Tensor> take_tensors() {  // under mu
    std::vector<Tensor> out = tensors_done;
    if (--tensor_takers == 0) tensors_done.clear();
    return out;
  }
  // split(): the subgroups made at each split, by (split number, color).
  std::map<std::pair<uint64_t, int>, std::shared_ptr<Shared>> children;
  uint64_t splits = 0;
  // transports: one mailbox per (from, to, channel).
  std::map<std::tuple<int, int, int>, std::shared_ptr<Mailbox>> boxes;

  // Every member's string (and tensor, when `tensors` is given), by rank.
  // The results of generation g stay in `done` until g + 1 completes, which
  // needs every member, so a waiter woken late still reads its own.
  std::vector<std::string> exchange(int rank, std::string mine, double timeout, const char* what,
                                    Tensor tensor = {}, std::vector<Tensor>* tensors = nullptr) {
    std::unique_lock<std::mutex> lock(mu);
    if (cancelled)
      throw Aborted(detail::concat(what, ": cancelled (another rank of this process failed)"));
    slots[rank] = std::move(mine);
    tensor_slots[rank] = std::move(tensor);
    const uint64_t mine_gen = generation;
    if (++arrived == size) {
      done = slots;
      tensors_done.swap(tensor_slots);
      tensor_slots.assign(static_cast<size_t>(size), Tensor());
      tensor_takers = size;
      arrived = 0;
      ++generation;
      cv.notify_all();
      if (tensors) *tensors = take_tensors();
      return done;
    }
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeout));
    if (!cv.wait_until(lock, deadline, [&] { return generation != mine_gen || cancelled; })) {
      --arrived;  // this member leaves: the next collective must not count it
      slots[rank].clear();
      tensor_slots[rank] = Tensor();
      throw Error(detail::concat("timed out after ", timeout, " s waiting for ", what, " with all ",
                                 size, " ranks of its group (is a rank stuck or dead?)"));
    }
    if (generation == mine_gen) {
      tensor_slots[rank] = Tensor();
      throw Aborted(detail::concat(what, ": cancelled (another rank of this process failed)"));
    }
    if (tensors) *tensors = take_tensors();
    return done;
  }

  void set_cancelled(bool on) {
    std::vector<std::shared_ptr<Shared>> kids;
    {
      std::lock_guard<std::mutex> lock(mu);
      cancelled = on;
      if (!on) {
        arrived = 0;
        ++generation;
        tensor_slots.assign(static_cast<size_t>(size), Tensor());
        tensors_done.clear();
      }
      for (auto& [key, child] : children) kids.push_back(child);
    }
    cv.notify_all();
    for (auto& k : kids) k->set_cancelled(on);
  }

  std::shared_ptr<Mailbox> box(int from, int to, int channel, const std::string& name) {
    std::lock_guard<std::mutex> lock(mu);
    auto& b = boxes[{from, to, channel}];
    if (!b) b = std::make_shared<Mailbox>(name);
    return b;
  }
};

namespace {

class LocalTransport final : public Transport {
 public:
  LocalTransport(std::shared_ptr<Mailbox> out, std::shared_ptr<Mailbox> in, Device device,
                 std::string name)
      : out_(std::move(out)), in_(std::move(in)), dst_(device), name_(std::move(name)) {}
  // The receiver gets detached views (the sender never writes to a tensor it
  // has sent), copied to its device on arrival when that is another one.
  void send(int m, Message msg) override {
    NoGradGuard no_grad;
    for (Tensor& t : msg.tensors)
      if (t.defined()) {
        bytes_sent_ += static_cast<int64_t>(t.nbytes());
        t = t.detach();
      }
    ++messages_sent_;
    out_->put(m, std::move(msg));
  }
  Message receive(int m, std::chrono::duration<double> timeout) override {
    Message msg = in_->take(m, timeout);
    NoGradGuard no_grad;
    MemoryCategoryGuard cat(MemoryCategory::kActivation);
    for (Tensor& t : msg.tensors)
      if (t.defined() && t.device() != dst_) t = t.to(dst_);
    return msg;
  }
  void abort() override { in_->abort(); }
  void reset() override { in_->clear_abort(); }
  void drop_pending() override { in_->reset(); }
  const std::string& name() const override { return name_; }
  const char* kind() const override { return "local"; }

 private:
  std::shared_ptr<Mailbox> out_, in_;
  Device dst_;
  std::string name_;
};

template <class T>
void reduce_into(T* data, int64_t n, ReduceOp op, const std::vector<std::string>& all) {
  for (int64_t i = 0; i < n; ++i) {
    T acc;
    std::memcpy(&acc, all[0].data() + i * sizeof(T), sizeof(T));
    for (size_t r = 1; r < all.size(); ++r) {
      T v;
      std::memcpy(&v, all[r].data() + i * sizeof(T), sizeof(T));
      acc = op == ReduceOp::kSum   ? acc + v
            : op == ReduceOp::kMin ? std::min(acc, v)
                                   : std::max(acc, v);
    }
    data[i] = acc;
  }
}

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup::Shared> root,
                    std::shared_ptr<LocalGroup::Shared> shared, int rank, int world_rank,
                    double timeout)
      : root_(std::move(root)), shared_(std::move(shared)), rank_(rank), world_rank_(world_rank) {
    timeout_ = timeout;
  }
  int rank() const override { return rank_; }
  int size() const override { return shared_->size; }
  int world_rank() const override { return world_rank_; }
  int local_size() const override { return shared_->size; }

  void allreduce(double* data, int64_t n, ReduceOp op, const char* what) override {
    reduce(data, n, op, what);
  }
  void allreduce(float* data, int64_t n, ReduceOp op, const char* what) override {
    reduce(data, n, op, what);
  }
  void broadcast(std::string& bytes, int root, const char* what) override {
    bytes = shared_->exchange(rank_, bytes, timeout_, what)[root];
  }
  std::vector<std::string> allgather(const std::string& mine, const char* what) override {
    return shared_->exchange(rank_, mine, timeout_, what);
  }
  void barrier(const char* what) override { shared_->exchange(rank_, "", timeout_, what); }
  bool spans_processes() const override { return false; }
  std::vector<Tensor> share_tensors(const Tensor& mine, const char* what) override {
    std::vector<Tensor> all;
    shared_->exchange(rank_, "", timeout_, what, mine, &all);
    return all;
  }

  std::shared_ptr<Communicator> split(int color, int key) override {
    std::string mine(sizeof(int) * 2, '\0');
    std::memcpy(mine.data(), &color, sizeof(int));
    std::memcpy(mine.data() + sizeof(int), &key, sizeof(int));
    const std::vector<std::string> all =
        shared_->exchange(rank_, mine, timeout_, "splitting a local group");
    std::vector<std::tuple<int, int>> members;  // (key, rank) of my color
    for (int r = 0; r < static_cast<int>(all.size()); ++r) {
      int c, k;
      std::memcpy(&c, all[r].data(), sizeof(int));
      std::memcpy(&k, all[r].data() + sizeof(int), sizeof(int));
      if (c == color) members.emplace_back(k, r);
    }
    std::sort(members.begin(), members.end());
    int my_rank = 0;
    for (size_t i = 0; i < members.size(); ++i)
      if (std::get<1>(members[i]) == rank_) my_rank = static_cast<int>(i);
    std::shared_ptr<LocalGroup::Shared> child;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      // Every member reaches here after the same exchange: the split number is the generation.
      auto& c = shared_->children[{shared_->generation, color}];
      if (!c) c = std::make_shared<LocalGroup::Shared>(static_cast<int>(members.size()));
      child = c;
    }
    return std::make_shared<LocalCommunicator>(root_, child, my_rank, world_rank_, timeout_);
  }

  std::unique_ptr<Transport> transport(int peer, int channel, Device device,
                                       std::string name) override {
    GPIPE_CHECK(peer >= 0 && peer < size() && peer != rank_, "transport: bad peer ", peer);
    return std::make_unique<LocalTransport>(shared_->box(rank_, peer, channel, name),
                                            shared_->box(peer, rank_, channel, name), device, name);
  }

  [[noreturn]] void abort(int code) override { std::_Exit(code); }
  void cancel() override { root_->set_cancelled(true); }
  void resume() override { root_->set_cancelled(false); }

 private:
  template <class T>
  void reduce(T* data, int64_t n, ReduceOp op, const char* what) {
    std::string mine(reinterpret_cast<const char*>(data), static_cast<size_t>(n) * sizeof(T));
    reduce_into(data, n, op, shared_->exchange(rank_, std::move(mine), timeout_, what));
  }

  std::shared_ptr<LocalGroup::Shared>
      root_;  // the whole group's (cancel() reaches every split of it)
  std::shared_ptr<LocalGroup::Shared> shared_;
  int rank_, world_rank_;
};

}  // namespace

LocalGroup::LocalGroup(int size) : shared_(std::make_shared<Shared>(size)) {
  GPIPE_CHECK(size >= 1, "LocalGroup: size must be >= 1, got ", size);
}
LocalGroup::~LocalGroup() = default;
int LocalGroup::size() const { return shared_->size; }

std::shared_ptr<Communicator> LocalGroup::rank(int r) {
  GPIPE_CHECK(r >= 0 && r < shared_->size, "LocalGroup: rank ", r, " out of range [0, ",
              shared_->size, ")");
  return std::make_shared<LocalCommunicator>(shared_, shared_, r, r, 600);
}

}  // namespace gpipe
