#include "core/parallel.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <numeric>

#include "ops/ops.h"

using namespace gpipe;

TEST_CASE("parallel: parallel_for covers the range exactly once") {
  ThreadPool pool(3);
  IntraOpScope scope(&pool);
  CHECK(intra_op_threads() == 3);
  std::vector<int> hits(1000, 0);
  parallel_for(0, 1000, 10, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) ++hits[i];
  });
  CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
}

TEST_CASE("parallel: an exception in a task reaches the caller") {
  ThreadPool pool(2);
  IntraOpScope scope(&pool);
  CHECK_THROWS_WITH(parallel_for(0, 100, 1,
                                 [&](int64_t lo, int64_t) {
                                   if (lo > 0) throw Error("task failed");
                                 }),
                    "task failed");
  // The pool still works afterwards.
  std::atomic<int> n{0};
  parallel_for(0, 10, 1, [&](int64_t lo, int64_t hi) { n += static_cast<int>(hi - lo); });
  CHECK(n == 10);
}

TEST_CASE("parallel: nested parallel_for runs inline instead of deadlocking") {
  ThreadPool pool(2);
  IntraOpScope scope(&pool);
  std::atomic<int> n{0};
  parallel_for(0, 4, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      parallel_for(0, 4, 1, [&](int64_t a, int64_t b) { n += static_cast<int>(b - a); });
  });
  CHECK(n == 16);
}

TEST_CASE("parallel: results agree across thread counts") {
  Tensor a = Tensor::randn(Shape{96, 200}, 1), b = Tensor::randn(Shape{200, 130}, 2);
  std::vector<float> ref;
  {
    ThreadPool one(1);
    IntraOpScope s(&one);
    ref = ops::sum(ops::matmul(a, b), {0}).to_vector<float>();
  }
  ThreadPool three(3);
  IntraOpScope s(&three);
  auto got = ops::sum(ops::matmul(a, b), {0}).to_vector<float>();
  REQUIRE(got.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) CHECK(got[i] == Approx(ref[i]).epsilon(1e-4));
}
