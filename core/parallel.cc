#include "core/parallel.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <system_error>

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

// Note [Cheap wake-ups]. A kernel's parallel_for lasts tens of
// microseconds, so parking every helper on a condition variable between two
// of them (a futex wake-up, then a reschedule) costs as much as the work.
// Helpers therefore spin on `generation_` for a short while (kSpinRounds
// pause instructions, some 20-100 us) before they park, and the caller spins
// briefly for the helpers to finish before it waits. Tasks are claimed with
// an atomic counter; a job lives on the caller's stack, and the caller
// returns only after every helper that joined it has left it (refs == 0).
namespace {
constexpr int kSpinRounds = 1 << 11;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

struct ThreadPool::Job {
  const std::function<void(int)>* task;
  int n;
  std::atomic<int> next{0}, finished{0}, refs{0};
  std::mutex error_mu;
  std::exception_ptr error;

  // Claims and runs tasks until none is left.
  void work() {
    const bool outer = t_in_task;
    t_in_task = true;
    for (int i = next.fetch_add(1, std::memory_order_relaxed); i < n;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      try {
        (*task)(i);
      } catch (...) {
        std::lock_guard<std::mutex> g(error_mu);
        if (!error) error = std::current_exception();
      }
      finished.fetch_add(1, std::memory_order_acq_rel);
    }
    t_in_task = outer;
  }
  bool done() const {
    return finished.load(std::memory_order_acquire) == n &&
           refs.load(std::memory_order_acquire) == 0;
  }
};

ThreadPool::ThreadPool(int threads) : size_(threads) {
  GPIPE_CHECK(threads >= 1, "ThreadPool: thread count must be >= 1, got ", threads);
  // A thread the system refuses (RLIMIT_NPROC, the pid table) ends the pool
  // cleanly: the workers already started are stopped and joined, and the
  // error names the figure (never std::terminate on a joinable thread).
  try {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (const std::system_error& e) {
    const size_t started = workers_.size();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    throw Error(detail::concat("could not start thread ", started + 2, " of a pool of ", threads,
                               " (", e.what(),
                               "): the system allows no more threads for this user (ulimit -u) "
                               "or the machine; ask for fewer with --threads"));
  }
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
  while (true) {
    bool woke = false;
    for (int r = 0; r < kSpinRounds && !woke; ++r) {
      woke = stop_.load(std::memory_order_relaxed) ||
             generation_.load(std::memory_order_acquire) != seen;
      if (!woke) cpu_relax();
    }
    Job* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!woke) {
        ++sleepers_;
        cv_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
        --sleepers_;
      }
      if (stop_) return;
      seen = generation_.load();
      job = job_;
      if (job) job->refs.fetch_add(1, std::memory_order_relaxed);
    }
    if (!job) continue;  // that job was already over
    job->work();
    job->refs.fetch_sub(1, std::memory_order_acq_rel);
    std::lock_guard<std::mutex> lock(mu_);
    done_cv_.notify_all();
  }
}

void ThreadPool::run(int n, const std::function<void(int)>& task) {
  if (n <= 0) return;
  if (size_ == 1 || n == 1 ||
      t_in_task) {  // (inside a task: never try the lock this thread may hold)
    for (int i = 0; i < n; ++i) task(i);
    return;
  }
  std::unique_lock<std::mutex> guard(run_mu_, std::try_to_lock);
  if (!guard.owns_lock()) {
    for (int i = 0; i < n; ++i) task(i);
    return;
  }
  Job job;
  job.task = &task;
  job.n = n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &job;
    generation_.fetch_add(1, std::memory_order_release);
    if (sleepers_ > 0) cv_.notify_all();
  }
  job.work();
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = nullptr;  // no helper joins it from now on
  }
  for (int r = 0; r < kSpinRounds && !job.done(); ++r) cpu_relax();
  if (!job.done()) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return job.done(); });
  }
  if (job.error) std::rethrow_exception(job.error);
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
