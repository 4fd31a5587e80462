#include "pipeline/watchdog.h"

#include <cstdio>
#include <sstream>

namespace gpipe {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Watchdog::Watchdog(std::string who, double limit, int rows, double hard_limit,
                   std::function<void()> hard_stop)
    : who_(std::move(who)),
      limit_(limit),
      hard_limit_(hard_limit),
      hard_stop_(std::move(hard_stop)),
      state_(rows, "idle") {
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::start_step(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  step_ = step;
  running_ = true;
  started_ = std::chrono::steady_clock::now();
  reports_ = 0;
}

void Watchdog::set_blocking(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  blocking_ = on;
  blocking_since_ = std::chrono::steady_clock::now();
}

void Watchdog::end_step() {
  std::lock_guard<std::mutex> lock(mu_);
  running_ = false;
  blocking_ = false;
  for (auto& s : state_) s = "idle";
}

void Watchdog::set(int row, std::string what) {
  std::lock_guard<std::mutex> lock(mu_);
  state_[row] = std::move(what);
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(200));
    if (!running_ || stop_) continue;
    const double secs = seconds_since(started_);
    if (hard_stop_ && hard_limit_ > 0 && blocking_ &&
        seconds_since(blocking_since_) > hard_limit_) {
      std::fprintf(stderr,
                   "gpipe watchdog: %s: step %ld has run for %ld s, %ld s of them %s, past the "
                   "timeout; ending the job\n",
                   who_.c_str(), static_cast<long>(step_ + 1), static_cast<long>(secs),
                   static_cast<long>(seconds_since(blocking_since_)), state_[0].c_str());
      std::fflush(stderr);
      hard_stop_();
    }
    if (secs < limit_ * (reports_ + 1)) continue;
    ++reports_;
    std::ostringstream os;
    os << "gpipe watchdog: " << who_ << ": step " << step_ + 1 << " has run for "
       << static_cast<int64_t>(secs) << " s;";
    for (size_t i = 0; i < state_.size(); ++i)
      os << (state_.size() > 1 ? " [" + std::to_string(i) + "] " : " ") << state_[i];
    os << "\n";
    std::fputs(os.str().c_str(), stderr);
    std::fflush(stderr);
  }
}

}  // namespace gpipe
