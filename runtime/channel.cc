#include "runtime/channel.h"

namespace gpipe {

void Mailbox::put(int micro_batch, Message m) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    messages_[micro_batch] = std::move(m);
  }
  cv_.notify_all();
}

Message Mailbox::take(int micro_batch, std::chrono::duration<double> timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
  while (true) {
    if (aborted_) throw Aborted(detail::concat(name_, ": aborted while waiting for micro-batch ", micro_batch));
    auto it = messages_.find(micro_batch);
    if (it != messages_.end()) {
      Message m = std::move(it->second);
      messages_.erase(it);
      return m;
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !aborted_ && !messages_.count(micro_batch))
      throw Error(detail::concat(name_, ": no message for micro-batch ", micro_batch, " after ", timeout.count(),
                                 " s (a stage is stuck or the schedule is inconsistent)"));
  }
}

void Mailbox::abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
  }
  cv_.notify_all();
}

void Mailbox::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  messages_.clear();
  aborted_ = false;
}

}  // namespace gpipe
