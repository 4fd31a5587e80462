// bfloat16 and float16 pipelines (Note [Mixed precision] in
// core/precision.h): pipelined gradients equal single-device ones at the
// same precision, training curves stay within a band of fp32's, and
// balance by memory counts 16-bit activations.
#include "core/precision.h"

#include <dirent.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>
#include <unordered_set>

#include "core/autograd.h"
#include "core/rng.h"
#include "layers/conv.h"
#include "models/amoebanet.h"
#include "models/transformer.h"
#include "ops/ops.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "pipeline/balance.h"
#include "pipeline/microbatch.h"
#include "pipeline/pipeline.h"
#include "pipeline/profile.h"
#include "pipeline/simulate.h"
#include "tests/pipeline/pipeline_helpers.h"
#include "tests/pipeline/tiny_transformer.h"

using namespace gpipe;
using Catch::Contains;

namespace {

using testing::check_equivalence;
using testing::max_rel_diff;
using testing::reference_grads;
using testing::thread_count;
using testing::tiny;
using testing::token_batch;

}  // namespace

namespace {

struct PrecisionRun {
  double loss = 0;
  std::map<std::string, std::vector<float>> grads;
  int64_t bytes = 0;  // sent across cell boundaries
};

PrecisionRun run_at(Precision p, int k, int m, RematMode remat, const Batch& batch,
                    int threads = 1) {
  Pipeline pipe(models::transformer(tiny()),
                {.K = k, .M = m, .remat = remat, .threads_per_stage = threads, .precision = p},
                batch);
  PrecisionRun r;
  r.loss = pipe.train_step(batch).loss;
  for (const NamedTensor& t : pipe.named_state())
    if (t.tensor->requires_grad()) {
      REQUIRE(t.tensor->grad().dtype() == DType::kFloat32);  // master gradients stay float32
      r.grads[t.name] = t.tensor->grad().to_vector<float>();
    }
  for (const auto& [link, bytes] : pipe.bytes_sent()) r.bytes += bytes;
  return r;
}

}  // namespace

TEST_CASE("pipeline: in bfloat16 and float16, pipelined gradients equal single-device ones") {
  const Batch batch = token_batch(8, 5);
  for (Precision p : {Precision::kBFloat16, Precision::kFloat16}) {
    INFO("precision " << precision_name(p));
    // Single device, whole batch, at the same precision: run_layers rounds at
    // the same layer boundaries a pipeline does.
    Model model = models::transformer(tiny());
    Tensor loss;
    {
      PrecisionScope scope(p);
      loss = mean_loss(model, batch.inputs, batch.targets);
    }
    const PrecisionRun one = run_at(p, 1, 1, RematMode::kNever, batch);
    CHECK(one.loss == loss.item());  // the same operations: the same loss, bit for bit
    // The same micro-batches on 1 and on K cells: equal to float32 round-off
    // (the tied embedding's per-cell gradients add in another order).
    const PrecisionRun ref = run_at(p, 1, 4, RematMode::kNever, batch);
    for (int k : {2, 3}) {
      for (RematMode remat : {RematMode::kNever, RematMode::kAlways}) {
        INFO("K=" << k << " remat=" << remat_name(remat));
        const PrecisionRun got = run_at(p, k, 4, remat, batch);
        CHECK(got.loss == Approx(ref.loss).epsilon(1e-6));
        for (const auto& [name, g] : ref.grads) {
          INFO(name);
          CHECK(max_rel_diff(got.grads.at(name), g) < 1e-5);
        }
      }
    }
    // 16-bit boundaries: half the bytes of float32 ones (the same messages).
    const PrecisionRun f32 = run_at(Precision::kFloat32, 3, 4, RematMode::kNever, batch);
    const PrecisionRun half = run_at(p, 3, 4, RematMode::kNever, batch);
    REQUIRE(f32.bytes > 0);
    CHECK(half.bytes * 2 <= f32.bytes + 4 * 1024);  // the loss and token messages stay as they are
    CHECK(half.bytes * 2 >= f32.bytes - 64 * 1024);
    // And the precision did change the arithmetic, within a 16-bit band.
    const PrecisionRun f32_one = run_at(Precision::kFloat32, 1, 4, RematMode::kNever, batch);
    CHECK(ref.loss != f32_one.loss);
    CHECK(ref.loss == Approx(f32_one.loss).epsilon(2e-2));
    // The whole gradient within a 16-bit band of float32's (relative L2).
    double diff2 = 0, norm2 = 0;
    for (const auto& [name, g] : ref.grads) {
      const std::vector<float>& f = f32_one.grads.at(name);
      for (size_t i = 0; i < g.size(); ++i) {
        diff2 += (static_cast<double>(g[i]) - f[i]) * (static_cast<double>(g[i]) - f[i]);
        norm2 += static_cast<double>(f[i]) * f[i];
      }
    }
    UNSCOPED_INFO("gradient relative L2 difference from float32: " << std::sqrt(diff2 / norm2));
    CHECK(std::sqrt(diff2 / norm2) < (p == Precision::kBFloat16 ? 0.05 : 0.01));
    CHECK(std::sqrt(diff2 / norm2) > 0);
  }
}

TEST_CASE("pipeline: a training step has the same bits at 1, 2 and 3 intra-op threads") {
  // Every kernel splits its work so that no sum depends on the split (or on
  // where the heap put a task's scratch: tests/ops/scratch_alignment_test.cc).
  const Batch batch = token_batch(8, 5);
  for (Precision p : {Precision::kFloat32, Precision::kBFloat16, Precision::kFloat16}) {
    INFO("precision " << precision_name(p));
    const PrecisionRun one = run_at(p, 1, 2, RematMode::kNever, batch, 1);
    for (int threads : {2, 3}) {
      INFO("threads " << threads);
      const PrecisionRun got = run_at(p, 1, 2, RematMode::kNever, batch, threads);
      CHECK(std::memcmp(&got.loss, &one.loss, sizeof(double)) == 0);  // bits: -0, NaN
      for (const auto& [name, g] : one.grads) {
        INFO(name);
        const std::vector<float>& h = got.grads.at(name);
        REQUIRE(h.size() == g.size());
        CHECK(std::memcmp(h.data(), g.data(), g.size() * sizeof(float)) == 0);
      }
    }
  }
}

namespace {

// Mean training loss per window of `window` steps, training `model` on a
// fixed set of batches through K = 2, M = 2 at precision p (Adam).
std::vector<double> curve(Model model, const std::vector<Batch>& batches, Precision p, int steps,
                          int window, double lr, double loss_scale = 1) {
  Pipeline pipe(std::move(model), {.K = 2, .M = 2, .threads_per_stage = 1, .precision = p},
                batches[0]);
  optim::Adam opt(pipe.parameters(), {.lr = lr});
  pipe.set_loss_scale(loss_scale);
  std::vector<double> means;
  double sum = 0;
  for (int s = 0; s < steps; ++s) {
    sum += pipe.train_step(batches[s % batches.size()]).loss;
    if (loss_scale != 1) pipe.scale_grads(1 / loss_scale);
    opt.step();
    pipe.zero_grad();
    if ((s + 1) % window == 0) {
      means.push_back(sum / window);
      sum = 0;
    }
  }
  return means;
}

void check_band(const std::vector<double>& ref, const std::vector<double>& got, double band) {
  REQUIRE(ref.size() == got.size());
  CHECK(ref.back() < 0.85 * ref.front());  // it learns
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO("window " << i << ": fp32 " << ref[i] << ", 16-bit " << got[i]);
    CHECK(std::abs(got[i] - ref[i]) <= band * ref[i]);
  }
}

}  // namespace

TEST_CASE("pipeline: bf16 and fp16 training curves stay within a band of fp32's") {
  SECTION("Transformer") {
    // 16 batches: learning, not memorising (a memorised set's curve is chaotic
    // near zero loss, at any precision).
    std::vector<Batch> batches;
    for (uint64_t i = 0; i < 16; ++i) batches.push_back(token_batch(8, 20 + i));
    const Precision kinds[] = {Precision::kFloat32, Precision::kBFloat16, Precision::kFloat16};
    std::vector<std::vector<double>> runs;
    for (Precision p : kinds)
      runs.push_back(curve(models::transformer(tiny()), batches, p, 240, 20, 3e-3,
                           p == Precision::kFloat16 ? 1024 : 1));
    check_band(runs[0], runs[1], 0.03);
    check_band(runs[0], runs[2], 0.03);
  }
  SECTION("AmoebaNet-D") {
    models::AmoebaNetConfig c;
    c.num_normal_cells = 1;
    c.filters = 8;
    c.in_channels = 1;
    c.small_input = true;
    c.seed = 3;
    // Labels the images determine (which quadrant is brightest) and a steady
    // learning rate, so the run learns a rule: memorising random labels at
    // 3e-3 (this test's first form) drove the loss near zero, where the
    // curve is chaotic at any precision and a relative band compares
    // round-off (5-10% apart there once convolution gradients became
    // bfloat16 products; here within 1.5%).
    std::vector<Batch> batches;
    for (uint64_t i = 0; i < 16; ++i) {
      Tensor x = Tensor::randn(Shape{8, 1, 8, 8}, 40 + i);
      const std::vector<float> px = x.to_vector<float>();
      std::vector<int64_t> y(8);
      for (int64_t j = 0; j < 8; ++j) {
        float best = -1e30f;
        for (int64_t q = 0; q < 4; ++q) {
          float sum = 0;
          for (int64_t r = 0; r < 4; ++r)
            for (int64_t col = 0; col < 4; ++col)
              sum += px[j * 64 + ((q / 2) * 4 + r) * 8 + (q % 2) * 4 + col];
          if (sum > best) {
            best = sum;
            y[j] = q;
          }
        }
      }
      batches.push_back({{x}, {Tensor::from_vector(y, Shape{8})}});
    }
    const auto ref = curve(models::amoebanet(c), batches, Precision::kFloat32, 48, 8, 1e-3);
    check_band(ref, curve(models::amoebanet(c), batches, Precision::kBFloat16, 48, 8, 1e-3), 0.05);
  }
}

TEST_CASE("balance by memory counts float activations in 16 bits under bf16 and fp16") {
  Model model = models::transformer(tiny());
  const Batch batch = token_batch(4, 1);
  std::vector<BundleSpec> specs;
  specs.push_back(infer_specs(model.layers, spec_of(batch.inputs), &specs));
  const std::vector<double> f32 =
      layer_costs(model.layers, specs, BalanceBy::kMemory, batch.inputs);
  for (Precision p : {Precision::kBFloat16, Precision::kFloat16}) {
    INFO(precision_name(p));
    std::vector<double> half;
    {
      PrecisionScope scope(p);
      half = layer_costs(model.layers, specs, BalanceBy::kMemory, batch.inputs);
    }
    REQUIRE(half.size() == f32.size());
    for (size_t i = 0; i < f32.size(); ++i) {
      INFO("layer " << i << " (" << model.layers[i]->name() << ")");
      // Parameters, gradients and Adam moments stay float32: 16 bytes each.
      const double state = 16.0 * static_cast<double>(model.layers[i]->parameter_count());
      double float_out = 0, other_out = 0;
      for (const TensorSpec& t : specs[i + 1])
        (is_float_like(t.dtype) ? float_out : other_out) +=
            static_cast<double>(t.shape.numel() * dtype_size(t.dtype));
      CHECK(f32[i] == state + float_out + other_out);
      CHECK(half[i] == state + float_out / 2 + other_out);
    }
  }
}
