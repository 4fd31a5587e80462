#include "runtime/worker.h"

namespace gpipe {

DeviceWorker::DeviceWorker(Device device, int intra_op_threads)
    : device_(device), threads_(intra_op_threads), thread_([this] { loop(); }) {}

DeviceWorker::~DeviceWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DeviceWorker::loop() {
  ThreadPool pool(threads_);  // created on this thread: its intra-op budget
  IntraOpScope scope(&pool);
  std::unique_lock<std::mutex> lock(mu_);
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
