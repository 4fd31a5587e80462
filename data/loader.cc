// The prefetch thread: call the producer outside the lock, then wait for room
// in the queue (or for stop_) and push. finished_ plus error_ carry the end of
// the stream to the consumer in order, after the batches queued before it.
#include "data/loader.h"

#include "core/error.h"

namespace gpipe {

PrefetchLoader::PrefetchLoader(BatchProducer producer, int64_t depth)
    : producer_(std::move(producer)), depth_(depth) {
  GPIPE_CHECK(producer_ != nullptr, "PrefetchLoader: empty producer");
  GPIPE_CHECK(depth_ >= 1, "PrefetchLoader: depth must be at least 1, got ", depth_);
  thread_ = std::thread([this] { run(); });
}

PrefetchLoader::~PrefetchLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  not_full_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PrefetchLoader::run() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    std::optional<Batch> batch;
    std::exception_ptr error;
    try {
      batch = producer_();
    } catch (...) {
      error = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (error || !batch) {
      error_ = error;
      finished_ = true;
      lock.unlock();
      not_empty_.notify_all();
      return;
    }
    not_full_.wait(lock, [&] { return stop_ || static_cast<int64_t>(queue_.size()) < depth_; });
    if (stop_) return;
    queue_.push_back(std::move(*batch));
    lock.unlock();
    not_empty_.notify_one();
  }
}

std::optional<Batch> PrefetchLoader::next() {
  std::unique_lock<std::mutex> lock(mu_);
  not_empty_.wait(lock, [&] { return !queue_.empty() || finished_; });
  if (!queue_.empty()) {
    Batch b = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    not_full_.notify_one();
    return b;
  }
  if (error_) std::rethrow_exception(error_);
  return std::nullopt;
}

}  // namespace gpipe
