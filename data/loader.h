// PrefetchLoader: runs a BatchProducer on a background thread so the next
// batches are prepared while the current training step runs.
//
//   PrefetchLoader loader(image_batch_producer(ImageBatcher(train, {.batch_size = 128}),
//   /*epochs=*/1)); while (std::optional<Batch> b = loader.next()) step(*b);
//
// The queue holds at most `depth` finished batches (one more may be in the
// producer's hands); the producer waits when it is full. An exception thrown
// by the producer is rethrown by next() once the batches produced before it
// have been consumed, and by every later next(). The destructor stops the
// thread and joins it: a producer waiting on a full queue wakes at once; one
// inside the producer call is waited for (a producer must return eventually).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "data/batch.h"

namespace gpipe {

class PrefetchLoader {
 public:
  // Starts the background thread. `producer` must not be empty; depth >= 1.
  explicit PrefetchLoader(BatchProducer producer, int64_t depth = 2);
  ~PrefetchLoader();
  PrefetchLoader(const PrefetchLoader&) = delete;
  PrefetchLoader& operator=(const PrefetchLoader&) = delete;

  // The next batch, blocking until it is ready; std::nullopt once the
  // producer has said the stream is over. Rethrows the producer's exception.
  // Call from one consumer thread at a time.
  std::optional<Batch> next();

  int64_t depth() const { return depth_; }

 private:
  void run();

  BatchProducer producer_;
  const int64_t depth_;
  std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::deque<Batch> queue_;
  bool finished_ = false;  // the producer returned nullopt or threw
  bool stop_ = false;      // the destructor asked the thread to end
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after every other member exists
};

}  // namespace gpipe
