#include "core/parallel.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace gpipe {
namespace {

thread_local ThreadPool* t_pool = nullptr;
thread_local bool t_in_task = false;
std::mutex g_default_mu;
std::unique_ptr<ThreadPool> g_default;

int default_threads() {
  if (const char* env = std::getenv("GPIPE_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

ThreadPool::ThreadPool(int threads) : size_(threads) {
  GPIPE_CHECK(threads >= 1, "ThreadPool: thread count must be >= 1, got ", threads);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    while (next_ < n_tasks_) {
      const int i = next_++;
      lock.unlock();
      t_in_task = true;
      try {
        (*task_)(i);
      } catch (...) {
        std::lock_guard<std::mutex> g(mu_);
        if (!error_) error_ = std::current_exception();
      }
      t_in_task = false;
      lock.lock();
      if (++finished_ == n_tasks_) done_cv_.notify_all();
    }
  }
}

void ThreadPool::run(int n, const std::function<void(int)>& task) {
  if (n <= 0) return;
  std::unique_lock<std::mutex> job(run_mu_, std::try_to_lock);
  if (size_ == 1 || n == 1 || !job.owns_lock() || t_in_task) {
    for (int i = 0; i < n; ++i) task(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    task_ = &task;
    n_tasks_ = n;
    next_ = 0;
    finished_ = 0;
    error_ = nullptr;
    ++generation_;
  }
  cv_.notify_all();
  std::unique_lock<std::mutex> lock(mu_);
  while (next_ < n_tasks_) {
    const int i = next_++;
    lock.unlock();
    t_in_task = true;
    try {
      task(i);
    } catch (...) {
      std::lock_guard<std::mutex> g(mu_);
      if (!error_) error_ = std::current_exception();
    }
    t_in_task = false;
    lock.lock();
    ++finished_;
  }
  done_cv_.wait(lock, [&] { return finished_ == n_tasks_; });
  task_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

ThreadPool& current_thread_pool() {
  if (t_pool) return *t_pool;
  std::lock_guard<std::mutex> lock(g_default_mu);
  if (!g_default) g_default = std::make_unique<ThreadPool>(default_threads());
  return *g_default;
}

int intra_op_threads() { return current_thread_pool().size(); }

void set_default_intra_op_threads(int threads) {
  GPIPE_CHECK(threads >= 1, "intra-op threads must be >= 1, got ", threads);
  std::lock_guard<std::mutex> lock(g_default_mu);
  g_default = std::make_unique<ThreadPool>(threads);
}

IntraOpScope::IntraOpScope(ThreadPool* pool) : prev_(t_pool) { t_pool = pool; }
IntraOpScope::~IntraOpScope() { t_pool = prev_; }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (t_in_task) {  // already inside a pool task: stay on this thread
    fn(begin, end);
    return;
  }
  ThreadPool& pool = current_thread_pool();
  const int64_t chunks = std::min<int64_t>(pool.size(), (n + grain - 1) / grain);
  if (chunks <= 1) {
    fn(begin, end);
    return;
  }
  const int64_t step = (n + chunks - 1) / chunks;
  pool.run(static_cast<int>(chunks), [&](int c) {
    const int64_t lo = begin + c * step, hi = std::min(end, lo + step);
    if (lo < hi) fn(lo, hi);
  });
}

}  // namespace gpipe
