// Mailbox: where one pipeline stage leaves a micro-batch's bundle for a
// neighbour. Messages are keyed by micro-batch, so arrival order never
// matters. A receive waits until its message arrives, the mailbox is aborted
// (another stage failed), or the deadline passes; it never waits forever.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "core/bundle.h"
#include "core/error.h"

namespace gpipe {

// Thrown in a stage that was waiting when another stage failed. The executor
// reports the original failure, not this one.
class Aborted : public Error {
 public:
  using Error::Error;
};

struct Message {
  Bundle tensors;
  std::vector<bool> requires_grad;  // per tensor: does the sender want its gradient back
};

class Mailbox {
 public:
  explicit Mailbox(std::string name) : name_(std::move(name)) {}
  void put(int micro_batch, Message m);
  // Waits for micro_batch's message; throws Aborted, or gpipe::Error after `timeout`.
  Message take(int micro_batch, std::chrono::duration<double> timeout);
  void abort();
  void reset();        // forget messages and the abort flag (start of a step)
  void clear_abort();  // the abort flag only (messages that arrived early stay)
  // Every present and future take() throws gpipe::Error(`why`) (the sender side broke).
  void fail(std::string why);
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, Message> messages_;
  bool aborted_ = false;
  std::string failed_;
};

}  // namespace gpipe
