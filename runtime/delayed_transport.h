// DelayedTransport: a link made slower on purpose, for tests and
// benchmarks of latency-built orders (PipelineOptions::link_delay_seconds).
// Every message reaches the wrapped transport `delay` after its send(): the
// sender returns at once, as from any send, and the message waits in a
// delay line (one thread per link) meanwhile, so the link has latency
// without occupying either stage. Messages keep their order. Receives,
// aborts and resets go straight to the wrapped link; drop_pending() also
// forgets what is still in the line.
//
//   auto slow = std::make_unique<DelayedTransport>(std::move(link), 2e-3);  // 2 ms a hop
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/transport.h"

namespace gpipe {

class DelayedTransport final : public Transport {
 public:
  // `delay_seconds` > 0; throws gpipe::Error otherwise.
  DelayedTransport(std::unique_ptr<Transport> inner, double delay_seconds);
  ~DelayedTransport() override;  // what is still in the line is dropped

  // Queues the message; a failure of the wrapped send is thrown by the next send or flush.
  void send(int m, Message msg) override;
  Message receive(int m, std::chrono::duration<double> timeout) override;
  void abort() override;
  void reset() override;
  void drop_pending() override;
  // Waits until the line is empty, then flushes the wrapped link.
  void flush(std::chrono::duration<double> timeout) override;
  const std::string& name() const override;
  const char* kind() const override;
  double delay_seconds() const { return delay_.count(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Queued {
    Clock::time_point due;
    int m;
    Message msg;
  };
  void deliver_loop();
  void rethrow_failure();  // mu_ held

  std::unique_ptr<Transport> inner_;
  std::chrono::duration<double> delay_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> line_;
  bool stop_ = false;
  std::exception_ptr failure_;
  std::thread thread_;  // started by the first send
};

}  // namespace gpipe
