// LocalGroup (runtime/local_group.h): the ranks of a job played by threads.
// Each thread's communicator knows its rank; collectives meet across the
// threads (sums in rank order, a root's broadcast); a transport between two
// ranks delivers a micro-batch's message to the other thread.
#include "runtime/local_group.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "runtime/communicator.h"
#include "runtime/transport.h"

using namespace gpipe;
using namespace std::chrono_literals;

namespace {

// Runs fn(rank) on one thread per rank of `group` and joins them.
template <class F>
void on_every_rank(LocalGroup& group, F fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < group.size(); ++r) threads.emplace_back([&, r] { fn(r); });
  for (auto& t : threads) t.join();
}

}  // namespace

TEST_CASE("local group: each rank's communicator knows its rank and the group's size") {
  LocalGroup group(3);
  CHECK(group.size() == 3);
  for (int r = 0; r < 3; ++r) {
    CHECK(group.rank(r)->rank() == r);
    CHECK(group.rank(r)->size() == 3);
    CHECK_FALSE(group.rank(r)->spans_processes());
  }
}

TEST_CASE("local group: an all-reduce sums every rank's values; a broadcast reaches every rank") {
  LocalGroup group(3);
  std::vector<double> sums(3);
  std::vector<std::string> got(3);
  on_every_rank(group, [&](int r) {
    auto comm = group.rank(r);
    double v[2] = {static_cast<double>(r + 1), 10.0 * r};
    comm->allreduce(v, 2, ReduceOp::kSum, "test sum");
    sums[r] = v[0] + v[1];
    std::string bytes = r == 1 ? "from rank 1" : "";
    comm->broadcast(bytes, 1, "test broadcast");
    got[r] = bytes;
  });
  for (int r = 0; r < 3; ++r) {
    CHECK(sums[r] == 6.0 + 30.0);
    CHECK(got[r] == "from rank 1");
  }
}

TEST_CASE("local group: a transport carries a micro-batch's message from one rank to another") {
  LocalGroup group(2);
  float received = 0;
  on_every_rank(group, [&](int r) {
    auto comm = group.rank(r);
    auto link = comm->transport(1 - r, 0, Device("cpu:0"), "test link");
    if (r == 0) {
      link->send(4, {{Tensor::from_vector(std::vector<float>{2.5f}, Shape{1})}, {false}});
      link->flush(10s);
    } else {
      received = link->receive(4, 10s).tensors.at(0).to_vector<float>().at(0);
    }
  });
  CHECK(received == 2.5f);
}
