// W2's training step on cuda:0, for tools/gpu_check.sh: the 3+3 Transformer
// of docs/BENCHMARKS.md (d 256, FFN 1024, 4 heads, vocab 8192, N = 32,
// 32 + 32 tokens, Adam 1e-4), in float32, TF32 and bf16 (Note [Mixed
// precision]), through gpipe's Pipeline with one cell, then the same at
// T(6, 4096, 16), d 1024, N = 64, 128 + 128 tokens, where the GPU is not
// bound by kernel launches. Per run: median step of 10 after 3 warm-up
// steps, tokens/s, model TFLOP/s (3 x the forward FLOPs the layers' cost
// estimates c_i give, the partitioner's figure) and MFU against the dense
// peak of the precision's products (tests/cuda/peaks.h), the device's
// allocator peak, and the first and last loss.
//
//   bazel run --config=cuda //tests/cuda:w2_bench [-- --quick | --only=T6:bf16]
//
// --quick: W2 only; --only=SHAPE:MODE: one run (e.g. under ncu). Exit status 1 if a step fails or a
// loss is not finite.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/precision.h"
#include "models/transformer.h"
#include "optim/adam.h"
#include "pipeline/pipeline.h"
#include "runtime/cuda/device.h"
#include "tests/cuda/peaks.h"

namespace {

using namespace gpipe;

const Device kGpu(DeviceType::kCUDA, 0);

struct Shape2 {
  const char* name;
  models::TransformerConfig config;
  int64_t batch, src_len, tgt_len;
};

// Uniform tokens in [1, vocab) (no padding, nothing ignored), as gpipe_bench's W2.
Batch token_batch(const Shape2& s, uint64_t seed) {
  uint64_t x = seed;
  auto next = [&] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>(1 + (x >> 33) % (s.config.vocab - 1));
  };
  std::vector<int64_t> src(s.batch * s.src_len), tin(s.batch * s.tgt_len),
      tout(s.batch * s.tgt_len);
  for (auto* v : {&src, &tin, &tout})
    for (auto& t : *v) t = next();
  return {{Tensor::from_vector(src, gpipe::Shape{s.batch, s.src_len}),
           Tensor::from_vector(tin, gpipe::Shape{s.batch, s.tgt_len})},
          {Tensor::from_vector(tout, gpipe::Shape{s.batch, s.tgt_len})}};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One precision mode; returns false on a non-finite loss.
bool run(const Shape2& s, const char* mode, Precision precision, bool tf32, double peak) {
  gpipe::cuda::set_allow_tf32(tf32);
  const Batch batch = token_batch(s, 1234);
  Pipeline pipe(models::transformer(s.config),
                {.cells = 1, .micro_batches = 1, .devices = {kGpu}, .precision = precision}, batch);
  optim::Adam opt(pipe.parameters(), {.lr = 1e-4});
  std::vector<double> losses, seconds;
  auto step = [&] {
    pipe.zero_grad();
    losses.push_back(pipe.train_step(batch).loss);  // the loss is read on the host: synchronous
    opt.step();
    gpipe::cuda::synchronize(0);
  };
  for (int i = 0; i < 3; ++i) step();
  for (int i = 0; i < 10; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    seconds.push_back(seconds_since(t0));
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  double forward_flops = 0;
  for (const CellInfo& c : pipe.cells()) forward_flops += c.cost;
  const double tflops = 3 * forward_flops / median / 1e12;
  const double tokens = static_cast<double>(s.batch * (s.src_len + s.tgt_len));
  std::printf("%-4s %-5s step %8.3f ms  %10.0f tok/s  %7.2f TFLOP/s", s.name, mode, median * 1e3,
              tokens / median, tflops);
  if (peak > 0) std::printf("  MFU %5.2f%% of %.1f", 100 * tflops / peak, peak);
  std::printf("  device peak %.1f MB  loss %.4f -> %.4f\n",
              allocator_for(kGpu).stats().peak_total / 1e6, losses.front(), losses.back());
  gpipe::cuda::set_allow_tf32(false);
  return std::isfinite(losses.front()) && std::isfinite(losses.back());
}

}  // namespace

int main(int argc, char** argv) {
  if (gpipe::cuda::device_count() == 0) {
    std::printf("SKIPPED: no CUDA device found\n");
    return 0;
  }
  bool quick = false;
  std::string only;  // "T6:bf16": that shape and mode alone (for a profiler)
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (std::strncmp(argv[i], "--only=", 7) == 0)
      only = argv[i] + 7;
    else {
      std::fprintf(stderr, "w2_bench: unknown argument '%s' (expected --quick or --only=T6:bf16)\n",
                   argv[i]);
      return 2;
    }
  }
  auto wanted = [&](const char* shape, const char* mode) {
    return only.empty() || only == std::string(shape) + ":" + mode;
  };
  const cudaDeviceProp& p = gpipe::cuda::device_properties(0);
  const gpipe::testing::Peaks peaks = gpipe::testing::device_peaks(p.name);
  std::printf("device cuda:0 = %s; MFU: model FLOPs (3 x forward) / step / dense peak\n", p.name);

  std::vector<Shape2> shapes;
  models::TransformerConfig w2;
  w2.layers = 3;
  w2.ffn = 1024;
  w2.heads = 4;
  w2.dim = 256;
  w2.vocab = 8192;
  w2.max_len = 64;
  shapes.push_back({"W2", w2, 32, 32, 32});
  if (!quick) {
    models::TransformerConfig big;
    big.layers = 6;
    big.ffn = 4096;
    big.heads = 16;
    big.dim = 1024;
    big.vocab = 32000;
    big.max_len = 128;
    shapes.push_back({"T6", big, 64, 128, 128});
  }
  bool ok = true;
  try {
    for (const Shape2& s : shapes) {
      if (wanted(s.name, "fp32")) ok = run(s, "fp32", Precision::kFloat32, false, peaks.fp32) && ok;
      if (wanted(s.name, "tf32")) ok = run(s, "tf32", Precision::kFloat32, true, peaks.tf32) && ok;
      if (wanted(s.name, "bf16"))
        ok = run(s, "bf16", Precision::kBFloat16, false, peaks.bf16) && ok;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "w2_bench: %s\n", e.what());
    return 1;
  }
  return ok ? 0 : 1;
}
