// The pipeline on a GPU: K cells sharing cuda:0 compute the gradients one
// cell computes there, in float32 and in bfloat16 (Note [Mixed precision]),
// optimizer steps run on the device, and steps leak no device memory.
#include "pipeline/pipeline.h"

#include <catch2/catch.hpp>
#include <map>

#include "core/allocator.h"
#include "core/precision.h"
#include "models/transformer.h"
#include "optim/adam.h"
#include "tests/pipeline/tiny_transformer.h"

using namespace gpipe;

namespace {

const Device kGpu(DeviceType::kCUDA, 0);

struct Run {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> grads;  // after the last step's backward
};

Run train(int k, Precision p, int steps) {
  const Batch batch = testing::token_batch(8, 5);
  Pipeline pipe(models::transformer(testing::tiny()),
                {.cells = k, .micro_batches = 4, .devices = {kGpu}, .precision = p}, batch);
  optim::Adam opt(pipe.parameters(), {.lr = 1e-2});
  Run r;
  for (int s = 0; s < steps; ++s) {
    r.losses.push_back(pipe.train_step(batch).loss);
    if (s + 1 == steps)
      for (const NamedTensor& t : pipe.named_state())
        if (t.tensor->requires_grad()) r.grads[t.name] = t.tensor->grad().to_vector<float>();
    opt.step();
    pipe.zero_grad();
  }
  return r;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 1e-2, diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::abs(a[i])));
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
  }
  return diff / scale;
}

}  // namespace

TEST_CASE("cuda pipeline: K = 2 and 4 cells on cuda:0 equal one cell, in fp32 and bf16") {
  for (Precision p : {Precision::kFloat32, Precision::kBFloat16}) {
    const Run one = train(1, p, 3);
    for (int k : {2, 4}) {
      INFO("precision " << precision_name(p) << ", K=" << k);
      const Run got = train(k, p, 3);
      for (size_t s = 0; s < one.losses.size(); ++s)
        CHECK(got.losses[s] == Approx(one.losses[s]).epsilon(1e-5));
      for (const auto& [name, g] : one.grads) {
        INFO(name);
        CHECK(max_rel_diff(got.grads.at(name), g) < 1e-4);
      }
    }
  }
}

TEST_CASE("cuda pipeline: training on cuda:0 lowers the loss and leaks no device memory") {
  const Batch batch = testing::token_batch(8, 7);
  for (Precision p : {Precision::kFloat32, Precision::kBFloat16}) {
    INFO("precision " << precision_name(p));
    Pipeline pipe(models::transformer(testing::tiny()),
                  {.cells = 2, .micro_batches = 2, .devices = {kGpu}, .precision = p}, batch);
    optim::Adam opt(pipe.parameters(), {.lr = 1e-2});
    std::vector<double> losses;
    int64_t live_after_warmup = 0;
    for (int s = 0; s < 60; ++s) {
      losses.push_back(pipe.train_step(batch).loss);
      opt.step();
      pipe.zero_grad();
      if (s == 4) live_after_warmup = allocator_for(kGpu).stats().live_total;
    }
    CHECK(losses.back() < 0.5 * losses.front());
    // Steady state: what is live after step 60 is what was live after step 5.
    CHECK(allocator_for(kGpu).stats().live_total == live_after_warmup);
  }
}
