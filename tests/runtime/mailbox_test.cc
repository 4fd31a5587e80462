// Mailbox (runtime/mailbox.h): messages keyed by micro-batch, a take that
// waits for its message, times out naming the mailbox, wakes on abort, and
// fails with the sender's reason; reset and clear_abort start a new step.
#include "runtime/mailbox.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "core/tensor.h"

using namespace gpipe;
using Catch::Contains;
using namespace std::chrono_literals;

namespace {

Message message(float value) {
  return {{Tensor::from_vector(std::vector<float>{value}, Shape{1})}, {false}};
}

float value_of(const Message& m) { return m.tensors.at(0).to_vector<float>().at(0); }

}  // namespace

TEST_CASE("mailbox: messages are keyed by micro-batch, so arrival order does not matter") {
  Mailbox box("test box");
  box.put(1, message(1.0f));
  box.put(0, message(0.5f));
  CHECK(value_of(box.take(0, 1s)) == 0.5f);
  CHECK(value_of(box.take(1, 1s)) == 1.0f);
}

TEST_CASE("mailbox: a take waits for its message from another thread") {
  Mailbox box("test box");
  std::thread sender([&] {
    std::this_thread::sleep_for(20ms);
    box.put(3, message(3.0f));
  });
  CHECK(value_of(box.take(3, 10s)) == 3.0f);
  sender.join();
}

TEST_CASE("mailbox: a take times out naming the mailbox and the micro-batch") {
  Mailbox box("activations of stage 0 to stage 1");
  CHECK_THROWS_WITH(box.take(2, 0.02s), Contains("activations of stage 0 to stage 1") &&
                                            Contains("micro-batch 2") && Contains("timed out"));
}

TEST_CASE("mailbox: abort wakes a waiting take with Aborted; clear_abort keeps early messages") {
  Mailbox box("test box");
  std::thread aborter([&] {
    std::this_thread::sleep_for(20ms);
    box.abort();
  });
  CHECK_THROWS_AS(box.take(0, 10s), Aborted);
  aborter.join();
  box.put(5, message(5.0f));
  CHECK_THROWS_AS(box.take(5, 1s), Aborted);  // still aborted
  box.clear_abort();
  CHECK(value_of(box.take(5, 1s)) == 5.0f);
}

TEST_CASE("mailbox: fail makes every take throw the sender's reason; reset forgets messages") {
  Mailbox box("test box");
  box.fail("the sender's link broke");
  CHECK_THROWS_WITH(box.take(0, 1s), Contains("the sender's link broke"));
  Mailbox other("other box");
  other.put(0, message(1.0f));
  other.abort();
  other.reset();  // a new step: no abort, no leftover message
  CHECK_THROWS_WITH(other.take(0, 0.02s), Contains("timed out"));
}
