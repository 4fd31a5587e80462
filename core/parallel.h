// Intra-op parallelism with a per-thread budget.
//
// Each pipeline device worker owns a ThreadPool sized by its intra-op thread
// setting and installs it with IntraOpScope; kernels call parallel_for, which
// splits work over the calling thread's pool. Threads outside any scope use
// the process default pool (GPIPE_NUM_THREADS, else the number of cores).
// parallel_for inside a pool task runs serially, so nesting never deadlocks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/cxx_version.h"

namespace gpipe {

class ThreadPool {
 public:
  // `threads` counts the caller: a pool of 1 runs everything on the caller.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }
  // Runs task(0..n-1) across the pool and the caller; returns when all are
  // done and rethrows the first exception. If another thread is using the pool,
  // runs serially on the caller instead of waiting.
  void run(int n, const std::function<void(int)>& task);

  struct Job;  // one run() call's tasks (parallel.cc)

 private:
  void worker_loop();

  int size_;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // one job at a time
  std::mutex mu_;      // guards job_, sleepers_ and the condition variables
  std::condition_variable cv_, done_cv_;
  Job* job_ = nullptr;                   // the job workers may join, or none
  std::atomic<uint64_t> generation_{0};  // bumped for every job: what spinning workers watch
  std::atomic<bool> stop_{false};
  int sleepers_ = 0;  // workers parked on cv_
};

// The pool parallel_for uses on this thread.
ThreadPool& current_thread_pool();
int intra_op_threads();
// Sets the default pool's size for threads outside any IntraOpScope.
void set_default_intra_op_threads(int threads);

class IntraOpScope {
 public:
  explicit IntraOpScope(ThreadPool* pool);
  ~IntraOpScope();
  IntraOpScope(const IntraOpScope&) = delete;
  IntraOpScope& operator=(const IntraOpScope&) = delete;

 private:
  ThreadPool* prev_;
};

// Calls fn(lo, hi) on disjoint chunks covering [begin, end), each at least
// `grain` long (except the last), in parallel on the current pool.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

}  // namespace gpipe
