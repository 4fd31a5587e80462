#include "runtime/mailbox.h"

namespace gpipe {

void Mailbox::put(int micro_batch, Message m) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    GPIPE_ASSERT(messages_.count(micro_batch) == 0, name_, ": a second message for micro-batch ",
                 micro_batch, " before the first was taken");
    messages_[micro_batch] = std::move(m);
  }
  cv_.notify_all();
}

Message Mailbox::take(int micro_batch, std::chrono::duration<double> timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
  while (true) {
    if (aborted_)
      throw Aborted(detail::concat(name_, ": aborted while waiting for micro-batch ", micro_batch));
    if (!failed_.empty()) throw Error(failed_);
    auto it = messages_.find(micro_batch);
    if (it != messages_.end()) {
      Message m = std::move(it->second);
      messages_.erase(it);
      return m;
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !aborted_ && failed_.empty() &&
        !messages_.count(micro_batch))
      throw Error(detail::concat("timed out after ", timeout.count(), " s waiting for ", name_,
                                 ", micro-batch ", micro_batch,
                                 " (is a stage stuck or dead? raise --timeout for slow steps)"));
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

namespace gpipe {

void Mailbox::clear_abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = false;
}

void Mailbox::fail(std::string why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = std::move(why);
  }
  cv_.notify_all();
}

}  // namespace gpipe
