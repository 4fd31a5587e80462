// Watchdog: when a step runs longer than its limit, prints (to stderr) what
// every local stage is doing or waiting for; one report per limit elapsed.
// In a multi-process job it also ends the job when a phase marked blocking
// (set_blocking) outlasts a hard limit (Note [Large all-reduces]).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gpipe {

class Watchdog {
 public:
  // `hard_stop`: called when a phase marked blocking (set_blocking) lasts
  // longer than `hard_limit` seconds: a multi-process job ends itself there
  // (Note [Large all-reduces]: those waits have no deadline of their own).
  Watchdog(std::string who, double limit, int rows, double hard_limit = 0,
           std::function<void()> hard_stop = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  void start_step(int64_t step);
  void set_blocking(bool on);
  void end_step();
  // What local stage `row` is doing now ("waiting for ...").
  void set(int row, std::string what);

  // One line per Watchdog of this process whose step is running: who, the
  // step, for how long, and what each of its stages does or waits for; ""
  // when no step runs. Thread-safe; for a process that is being ended from
  // outside (Note [Ended by the launcher] in tools/train/interrupt.cc).
  static std::string running_steps();

 private:
  void loop();
  // "<who>: step S has run for T s; <what each stage does>" (mu_ held).
  std::string report_locked(double secs, int precision) const;

  std::string who_;
  double limit_, hard_limit_;
  std::function<void()> hard_stop_;
  std::vector<std::string> state_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, running_ = false, blocking_ = false;
  std::chrono::steady_clock::time_point blocking_since_;
  int64_t step_ = 0;
  int reports_ = 0;
  std::chrono::steady_clock::time_point started_;
  std::thread thread_;
};

}  // namespace gpipe
