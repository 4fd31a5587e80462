#include "data/loader.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <stdexcept>
#include <thread>

using namespace gpipe;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

Batch numbered(int64_t i) { return Batch{{Tensor::full(Shape{1}, static_cast<double>(i))}, {}}; }

// Waits (up to 5 s) until `pred` holds.
template <class Pred>
bool eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace

TEST_CASE("PrefetchLoader delivers the producer's batches in order, then the end",
          "[data][loader]") {
  int64_t i = 0;
  PrefetchLoader loader([&i]() -> std::optional<Batch> {
    if (i == 5) return std::nullopt;
    return numbered(i++);
  });
  for (int64_t want = 0; want < 5; ++want) {
    std::optional<Batch> b = loader.next();
    REQUIRE(b.has_value());
    CHECK(b->inputs[0].item() == want);
  }
  CHECK_FALSE(loader.next().has_value());
  CHECK_FALSE(loader.next().has_value());
}

TEST_CASE("PrefetchLoader rethrows the producer's exception after the batches before it",
          "[data][loader]") {
  int64_t i = 0;
  PrefetchLoader loader([&i]() -> std::optional<Batch> {
    if (i == 2) throw Error("corrupt shard 2");
    return numbered(i++);
  });
  CHECK(loader.next()->inputs[0].item() == 0);
  CHECK(loader.next()->inputs[0].item() == 1);
  CHECK_THROWS_AS(loader.next(), Error);
  CHECK_THROWS_WITH(loader.next(), Contains("corrupt shard 2"));  // and on every later call
}

TEST_CASE(
    "PrefetchLoader stays depth ahead and shuts down while the producer waits on a full queue",
    "[data][loader]") {
  std::atomic<int64_t> calls{0};
  auto start = std::chrono::steady_clock::now();
  {
    PrefetchLoader loader([&calls]() -> std::optional<Batch> { return numbered(calls++); },
                          /*depth=*/2);
    // Two batches queued plus one in hand, blocked on the full queue.
    REQUIRE(eventually([&] { return calls.load() == 3; }));
    std::this_thread::sleep_for(20ms);
    CHECK(calls.load() == 3);  // bounded: it does not run ahead
    CHECK(loader.next()->inputs[0].item() == 0);
    REQUIRE(eventually([&] { return calls.load() == 4; }));
    start = std::chrono::steady_clock::now();
  }  // destructor: wakes the blocked producer and joins
  CHECK(std::chrono::steady_clock::now() - start < 1s);
  CHECK(calls.load() == 4);
}

TEST_CASE("PrefetchLoader waits for a slow producer call when destroyed", "[data][loader]") {
  std::atomic<bool> inside{false};
  std::atomic<bool> returned{false};
  {
    PrefetchLoader loader([&]() -> std::optional<Batch> {
      inside = true;
      std::this_thread::sleep_for(50ms);
      returned = true;
      return numbered(0);
    });
    REQUIRE(eventually([&] { return inside.load(); }));
  }
  CHECK(returned.load());  // joined: the thread did not outlive the loader
}

TEST_CASE("PrefetchLoader rejects bad arguments", "[data][loader]") {
  CHECK_THROWS_WITH(PrefetchLoader(BatchProducer()), Contains("empty producer"));
  CHECK_THROWS_WITH(PrefetchLoader([] { return std::optional<Batch>(); }, 0), Contains("depth"));
}
