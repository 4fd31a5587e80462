// The CPU kernels' 16-bit paths widen a piece of a tensor into float32
// scratch (ops/cpu/isa/prelude.h's vector) and sum over it with Eigen, whose
// vectorised reductions add the elements before the first aligned vector one
// at a time. Scratch aligned only as malloc aligns it made those sums depend
// on where the heap put each task's buffer: bf16 attention differed between
// thread counts and between runs of the same program. These tests move the
// heap between runs, on every thread of the pool, and want the bits of one
// thread every time.
#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/parallel.h"
#include "core/precision.h"
#include "ops/attention.h"
#include "ops/layer_norm.h"
#include "ops/ops.h"

using namespace gpipe;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.nbytes() == y.nbytes() && std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

// Blocks of odd sizes left allocated on each of the pool's threads, so that
// the kernels' scratch lands at other offsets from a cache line afterwards.
struct HeapShift {
  std::vector<std::unique_ptr<char[]>> blocks;
  std::mutex m;
  void shift(int64_t bytes) {
    parallel_for(0, 8, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        auto b = std::make_unique<char[]>(static_cast<size_t>(bytes + 8 * i));
        std::lock_guard<std::mutex> lock(m);
        blocks.push_back(std::move(b));
      }
    });
  }
};

// f's outputs at 1 thread, then at 2 and 3 threads after each of several
// heap shifts: the count of runs whose bits differ.
int differing_runs(const std::function<std::vector<Tensor>()>& f) {
  std::vector<Tensor> want;
  {
    ThreadPool pool(1);
    IntraOpScope scope(&pool);
    want = f();
  }
  int differ = 0;
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    IntraOpScope scope(&pool);
    HeapShift heap;
    for (int64_t shift = 4; shift <= 60; shift += 8) {
      heap.shift(shift);
      const std::vector<Tensor> got = f();
      bool equal = got.size() == want.size();
      for (size_t i = 0; equal && i < got.size(); ++i) equal = same_bits(got[i], want[i]);
      differ += !equal;
    }
  }
  return differ;
}

// Outputs and the gradients of sum(out * r) with respect to `leaves`.
std::vector<Tensor> with_grads(const Tensor& out, std::vector<Tensor> leaves) {
  for (Tensor& l : leaves) l.zero_grad();
  const Tensor r = Tensor::uniform(out.shape(), 9, -1, 1);
  ops::sum(ops::mul(out.to(DType::kFloat32), r)).backward();
  std::vector<Tensor> all{out};
  for (Tensor& l : leaves) all.push_back(l.grad());
  return all;
}

}  // namespace

TEST_CASE("bf16 attention: the same bits at any thread count, wherever the heap puts scratch") {
  PrecisionScope precision(Precision::kBFloat16);
  const int64_t b = 8, t = 32, d = 128;
  Tensor q = Tensor::uniform(Shape{b, t, d}, 1, -1, 1).to(DType::kBFloat16);
  Tensor kv = Tensor::uniform(Shape{b, t, d}, 2, -1, 1).to(DType::kBFloat16);
  q.set_requires_grad(true);
  kv.set_requires_grad(true);
  // Padded keys: the last 5 of every example.
  std::vector<float> flags(static_cast<size_t>(b * t), 0.0f);
  for (int64_t e = 0; e < b; ++e)
    for (int64_t j = t - 5; j < t; ++j) flags[static_cast<size_t>(e * t + j)] = 1.0f;
  const Tensor pad = Tensor::from_vector<float>(flags, Shape{b, t});
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    CHECK(differing_runs([&] {
            return with_grads(ops::attention(q, kv, kv, 4, causal), {q, kv});
          }) == 0);
    CHECK(differing_runs([&] {
            return with_grads(ops::attention(q, kv, kv, 4, causal, pad), {q, kv});
          }) == 0);
  }
}

TEST_CASE("bf16 layer norm: the same bits at any thread count, wherever the heap puts scratch") {
  PrecisionScope precision(Precision::kBFloat16);
  Tensor x = Tensor::uniform(Shape{64, 200}, 3, -2, 2).to(DType::kBFloat16);
  Tensor gamma = Tensor::uniform(Shape{200}, 4, 0.5, 1.5);
  Tensor beta = Tensor::uniform(Shape{200}, 5, -0.5, 0.5);
  x.set_requires_grad(true);
  gamma.set_requires_grad(true);
  beta.set_requires_grad(true);
  CHECK(differing_runs([&] {
          return with_grads(ops::layer_norm(x, gamma, beta), {x, gamma, beta});
        }) == 0);
}
