// The wire format of pipeline messages (what MPI and NCCL transports and
// broadcasts carry) and the in-process transport's contract.
#include "runtime/communicator.h"

#include <catch2/catch.hpp>
#include <thread>

#include "ops/shape.h"
#include "runtime/local_group.h"

namespace gpipe {
namespace {

using Catch::Matchers::Contains;

Message sample() {
  Message m;
  m.tensors = {Tensor::randn(Shape{2, 3}, 1), Tensor(),
               Tensor::from_vector<int64_t>({4, 5, 6}, Shape{3}),
               Tensor::randn(Shape{1}, 2, 1.0, DType::kFloat64)};
  m.requires_grad = {true, false, false, true};
  return m;
}

TEST_CASE(
    "A message survives serialisation: shapes, dtypes, values, undefined slots, gradient flags") {
  const Message m = sample();
  const Message back = deserialize_message(serialize_message(m), kCpu);
  REQUIRE(back.tensors.size() == 4);
  CHECK(back.requires_grad == m.requires_grad);
  CHECK(back.tensors[0].shape() == Shape{2, 3});
  CHECK(back.tensors[0].to_vector<float>() == m.tensors[0].to_vector<float>());
  CHECK_FALSE(back.tensors[1].defined());
  CHECK(back.tensors[2].dtype() == DType::kInt64);
  CHECK(back.tensors[2].to_vector<int64_t>() == std::vector<int64_t>{4, 5, 6});
  CHECK(back.tensors[3].to_vector<double>() == m.tensors[3].to_vector<double>());
}

TEST_CASE(
    "A header describes the tensors without their bytes; a non-contiguous view is sent as its "
    "values") {
  Message m;
  const Tensor base = Tensor::randn(Shape{3, 4}, 3);
  m.tensors = {ops::permute(base, {1, 0})};
  m.requires_grad = {true};
  const Message shell = decode_header(encode_header(m), kCpu);
  CHECK(shell.tensors[0].shape() == Shape{4, 3});
  CHECK(shell.requires_grad == std::vector<bool>{true});
  const Message back = deserialize_message(serialize_message(m), kCpu);
  CHECK(back.tensors[0].to_vector<float>() == m.tensors[0].contiguous().to_vector<float>());
}

TEST_CASE("Corrupt messages are rejected with a reason") {
  std::string bytes = serialize_message(sample());
  CHECK_THROWS_WITH(deserialize_message(bytes.substr(0, bytes.size() - 3), kCpu),
                    Contains("truncated"));
  CHECK_THROWS_WITH(deserialize_message(bytes + "xx", kCpu), Contains("trailing bytes"));
  bytes[0] ^= 0x55;
  CHECK_THROWS_WITH(deserialize_message(bytes, kCpu), Contains("not a gpipe message"));
}

TEST_CASE(
    "Local transport: keyed by micro-batch, copies to the destination device, times out, aborts, "
    "drops") {
  LocalGroup group(2);
  auto r0 = group.rank(0), r1 = group.rank(1);
  auto out = r0->transport(1, 0, Device("cpu:1"), "activations of stage 0 to stage 1");
  auto in = r1->transport(0, 0, Device("cpu:1"), "activations of stage 0 to stage 1");
  Message m;
  m.tensors = {Tensor::randn(Shape{2}, 4)};
  m.requires_grad = {true};
  out->send(1, m);
  CHECK(out->bytes_sent() == 8);
  CHECK_THROWS_WITH(in->receive(0, std::chrono::milliseconds(20)),
                    Contains("activations of stage 0 to stage 1") && Contains("micro-batch 0"));
  const Message got = in->receive(1, std::chrono::seconds(1));
  CHECK(got.tensors[0].device() == Device("cpu:1"));
  CHECK(got.tensors[0].to_vector<float>() == m.tensors[0].to_vector<float>());
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    in->abort();
  });
  CHECK_THROWS_AS(in->receive(2, std::chrono::seconds(30)), Aborted);
  stopper.join();
  in->reset();
  out->send(3, m);
  in->drop_pending();  // a failed step's leftovers do not reach the next step
  CHECK_THROWS_WITH(in->receive(3, std::chrono::milliseconds(20)), Contains("micro-batch 3"));
}

TEST_CASE(
    "Local group: cancel wakes a rank waiting in a collective with Aborted; resume restores it") {
  LocalGroup group(2);
  auto r0 = group.rank(0), r1 = group.rank(1);
  auto sub0 = std::shared_ptr<Communicator>(), sub1 = std::shared_ptr<Communicator>();
  std::thread t([&] { sub1 = r1->split(0, 1); });
  sub0 = r0->split(0, 0);
  t.join();
  double x = 1;
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    r1->cancel();  // a member of the parent group cancels: the split group's waiters wake too
  });
  CHECK_THROWS_AS(sub0->allreduce(&x, 1, ReduceOp::kSum, "summing"), Aborted);
  stopper.join();
  r0->resume();
  double a = 1, b = 2;
  std::thread other([&] { sub1->allreduce(&b, 1, ReduceOp::kSum, "summing"); });
  sub0->allreduce(&a, 1, ReduceOp::kSum, "summing");
  other.join();
  CHECK(a == 3);
  CHECK(b == 3);
}

}  // namespace
}  // namespace gpipe
