// The delay line: one thread per link sleeps until the oldest message is
// due and hands it to the wrapped transport, holding the line's mutex so
// that drop_pending() never races a delivery (a message is either still in
// the line, and dropped, or already in the wrapped link, and dropped there).
#include "runtime/delayed_transport.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace gpipe {

DelayedTransport::DelayedTransport(std::unique_ptr<Transport> inner, double delay_seconds)
    : inner_(std::move(inner)), delay_(delay_seconds) {
  GPIPE_CHECK(inner_ != nullptr, "DelayedTransport: no link to wrap");
  GPIPE_CHECK(delay_seconds > 0, "DelayedTransport: expected a positive delay, got ", delay_seconds,
              " s");
}

DelayedTransport::~DelayedTransport() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    line_.clear();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DelayedTransport::rethrow_failure() {
  if (failure_) std::rethrow_exception(failure_);
}

void DelayedTransport::send(int m, Message msg) {
  std::lock_guard<std::mutex> lock(mu_);
  rethrow_failure();
  if (!thread_.joinable()) thread_ = std::thread([this] { deliver_loop(); });
  line_.push_back(
      {Clock::now() + std::chrono::duration_cast<Clock::duration>(delay_), m, std::move(msg)});
  cv_.notify_all();
}

void DelayedTransport::deliver_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (line_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const Clock::time_point due = line_.front().due;
    if (Clock::now() < due) {
      cv_.wait_until(lock, due);
      continue;
    }
    Queued q = std::move(line_.front());
    line_.pop_front();
    try {
      inner_->send(q.m, std::move(q.msg));
      bytes_sent_ = inner_->bytes_sent();
      messages_sent_ = inner_->messages_sent();
    } catch (...) {
      if (!failure_) failure_ = std::current_exception();
    }
    cv_.notify_all();  // a flush may be waiting for the line to empty
  }
}

Message DelayedTransport::receive(int m, std::chrono::duration<double> timeout) {
  return inner_->receive(m, timeout);
}

void DelayedTransport::abort() { inner_->abort(); }

void DelayedTransport::reset() { inner_->reset(); }

void DelayedTransport::drop_pending() {
  std::lock_guard<std::mutex> lock(mu_);
  line_.clear();
  inner_->drop_pending();
}

void DelayedTransport::flush(std::chrono::duration<double> timeout) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_until(lock, deadline, [&] { return line_.empty() || failure_; }))
      throw Error(detail::concat(inner_->name(), ": ", line_.size(),
                                 " delayed messages still queued after ", timeout.count(), " s"));
    rethrow_failure();
  }
  inner_->flush(std::chrono::duration<double>(
      std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count())));
}

const std::string& DelayedTransport::name() const { return inner_->name(); }

const char* DelayedTransport::kind() const { return inner_->kind(); }

}  // namespace gpipe
