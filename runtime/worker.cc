#include "runtime/worker.h"

#include <system_error>

#include "core/error.h"

namespace gpipe {

DeviceWorker::DeviceWorker(Device device, int intra_op_threads)
    : device_(device), threads_(intra_op_threads) {
  try {
    thread_ = std::thread([this] { loop(); });
  } catch (const std::system_error& e) {
    throw Error(detail::concat("could not start the worker thread of ", device_, " (", e.what(),
                               "): the system allows no more threads for this user (ulimit -u) "
                               "or the machine; use fewer cells (--K) or --threads"));
  }
  // The worker's pool is made on its own thread; a pool the system refuses is
  // this constructor's error, not a worker that never takes a job.
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return started_; });
  if (start_error_) {
    lock.unlock();
    thread_.join();
    std::rethrow_exception(start_error_);
  }
}

DeviceWorker::~DeviceWorker() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DeviceWorker::loop() {
  std::unique_ptr<ThreadPool> pool;  // created on this thread: its intra-op budget
  std::exception_ptr failed;
  try {
    pool = std::make_unique<ThreadPool>(threads_);
  } catch (...) {
    failed = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mu_);
  start_error_ = failed;
  started_ = true;
  cv_.notify_all();
  if (failed) return;
  IntraOpScope scope(pool.get());
  while (true) {
    cv_.wait(lock, [&] { return stop_ || has_job_; });
    if (stop_) return;
    std::function<void()> job = std::move(job_);
    has_job_ = false;
    lock.unlock();
    std::exception_ptr err;
    try {
      job();
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    error_ = err;
    done_ = true;
    cv_.notify_all();
  }
}

void DeviceWorker::submit(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mu_);
  job_ = std::move(job);
  has_job_ = true;
  done_ = false;
  error_ = nullptr;
  cv_.notify_all();
}

std::exception_ptr DeviceWorker::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return error_;
}

std::vector<std::exception_ptr> run_all(std::vector<std::unique_ptr<DeviceWorker>>& workers,
                                        std::vector<std::function<void()>> jobs) {
  for (size_t i = 0; i < workers.size(); ++i) workers[i]->submit(std::move(jobs[i]));
  std::vector<std::exception_ptr> errors;
  for (auto& w : workers) errors.push_back(w->wait());
  return errors;
}

}  // namespace gpipe
