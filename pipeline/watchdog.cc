#include "pipeline/watchdog.h"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <sstream>

namespace gpipe {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Every live Watchdog of the process, for running_steps(). Never destroyed:
// a thread may ask while the process exits.
std::mutex& live_mutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::vector<const Watchdog*>& live() {
  static auto* all = new std::vector<const Watchdog*>;
  return *all;
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
  std::lock_guard<std::mutex> lock(live_mutex());
  live().push_back(this);
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(live_mutex());
    live().erase(std::find(live().begin(), live().end(), this));
  }
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
  // Looks often enough for a sub-second limit to be kept (a small --watchdog).
  const auto pause = std::chrono::duration<double>(std::clamp(limit_ / 4, 0.01, 0.2));
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, pause);
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
    const std::string line = "gpipe watchdog: " + report_locked(secs, limit_ < 1 ? 1 : 0) + "\n";
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  }
}

std::string Watchdog::report_locked(double secs, int precision) const {
  std::ostringstream os;
  os << who_ << ": step " << step_ + 1 << " has run for ";
  if (precision == 0)
    os << static_cast<int64_t>(secs);  // whole seconds, as the periodic reports count them
  else
    os << std::fixed << std::setprecision(precision) << secs;
  os << " s;";
  for (size_t i = 0; i < state_.size(); ++i)
    os << (state_.size() > 1 ? " [" + std::to_string(i) + "] " : " ") << state_[i];
  return os.str();
}

std::string Watchdog::running_steps() {
  std::string out;
  std::lock_guard<std::mutex> lock(live_mutex());
  for (const Watchdog* w : live()) {
    std::lock_guard<std::mutex> own(w->mu_);
    if (w->running_)
      out += (out.empty() ? "" : "\n") + w->report_locked(seconds_since(w->started_), 1);
  }
  return out;
}

}  // namespace gpipe
