// DeviceWorker: one long-lived thread per pipeline device (or stage), with
// its own intra-op thread pool, running the jobs it is given in order.
// run_all() hands one job to each worker and waits for all of them,
// returning every exception (by worker) so the caller can report the cause.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/parallel.h"

namespace gpipe {

class DeviceWorker {
 public:
  DeviceWorker(Device device, int intra_op_threads);
  ~DeviceWorker();
  DeviceWorker(const DeviceWorker&) = delete;
  DeviceWorker& operator=(const DeviceWorker&) = delete;

  Device device() const { return device_; }
  // Runs `job` on the worker thread; wait() returns its exception, if any.
  void submit(std::function<void()> job);
  std::exception_ptr wait();

 private:
  void loop();

  Device device_;
  int threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool has_job_ = false, done_ = true, stop_ = false;
  std::exception_ptr error_;
  bool started_ = false;            // the worker's pool is made (or failed: start_error_)
  std::exception_ptr start_error_;  // the pool's failure, rethrown by the constructor
  std::thread thread_;
};

// Runs jobs[i] on workers[i] concurrently; returns the exceptions by index.
std::vector<std::exception_ptr> run_all(std::vector<std::unique_ptr<DeviceWorker>>& workers,
                                        std::vector<std::function<void()>> jobs);

}  // namespace gpipe
