// W2's training step on cuda:0, for tools/gpu_check.sh and benchmarks/gpu_compare.py: the 3+3
// Transformer of docs/BENCHMARKS.md (d 256, FFN 1024, 4 heads, vocab 8192, N = 32, 32 + 32
// tokens, Adam 1e-4), in float32, TF32 and bf16 (Note [Mixed precision]), through gpipe's
// Pipeline with one cell, then the same at T(6, 4096, 16), d 1024, N = 64, 128 + 128 tokens,
// where the GPU is not bound by kernel launches, and (on request) the deeper T(12, 4096, 16),
// d 1024, N = 32, 256 + 256 tokens, and GPT2: GPT-2 small (124M, models/lm.h's "gpt2" preset, no
// dropout) at context 1024, N = 8, its next-token loss fused with the tied output. Per run: median
// step of 10 after 3 warm-up steps, tokens/s (source + target), model TFLOP/s (3 x the forward
// FLOPs the layers' cost estimates c_i give, the partitioner's figure) and MFU against the dense
// peak of the precision's products (tests/cuda/peaks.h), the device's allocator peak during the
// run, and the first and last loss.
//
//   bazel run --config=cuda //tests/cuda:w2_bench [-- --quick | --only=T6:bf16]
//   w2_bench --shapes=W2,T6,T12,GPT2 --modes=fp32,tf32,bf16 --json
//
// --quick: W2 only; --only=SHAPE:MODE: one run (e.g. under ncu); --shapes / --modes: those
// (default W2,T6 and every mode); --json: one JSON object per run on stdout, nothing else
// (shape, mode, sizes, step_ms, tokens_per_s, model_flops per step, tflops, peak_tflops, mfu as
// a fraction or null, peak_mb, loss_first, loss_last, device; or shape, mode, error). A failed
// run (an exception, e.g. out of memory) is reported and the next one runs. GPT2's JSON has
// src_len = the context and tgt_len = 0 (tokens/s counts N x T) and "model": "gpt2". Exit status 1
// if a run fails or a loss is not finite, 2 for a bad argument.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/precision.h"
#include "models/lm.h"
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
  models::TransformerConfig config;  // the Transformer's; for a language model, its sizes alone
  int64_t batch, src_len, tgt_len;
  bool lm = false;  // a decoder-only language model: lm_config, tokens [batch, src_len]
  models::LmConfig lm_config;
};

Shape2 make_shape(const char* name, int64_t layers, int64_t dim, int64_t ffn, int64_t heads,
                  int64_t vocab, int64_t batch, int64_t src_len, int64_t tgt_len) {
  models::TransformerConfig c;
  c.layers = layers;
  c.dim = dim;
  c.ffn = ffn;
  c.heads = heads;
  c.vocab = vocab;
  c.max_len = std::max(src_len, tgt_len);
  return {name, c, batch, src_len, tgt_len};
}

// GPT-2 small (124M: 12 layers, d 768, 12 heads, FFN 3072, vocab 50257) at `context` tokens.
Shape2 gpt2_shape(const char* name, int64_t batch, int64_t context) {
  models::LmConfig lm = models::lm_preset("gpt2");
  lm.context = context;
  lm.dropout = 0.0;
  lm.seed = 99;
  Shape2 s = make_shape(name, lm.layers, lm.dim, lm.ffn, lm.heads, lm.vocab, batch, context, 0);
  s.lm = true;
  s.lm_config = lm;
  return s;
}

// W2; T6 = T(6, 4096, 16); T12 = T(12, 4096, 16) at N = 32 with 256 + 256 tokens (about 386M
// parameters: its fp32 weights, gradients and Adam moments take 6.2 GB, its activations a few GB).
std::vector<Shape2> all_shapes() {
  return {make_shape("W2", 3, 256, 1024, 4, 8192, 32, 32, 32),
          make_shape("T6", 6, 1024, 4096, 16, 32000, 64, 128, 128),
          make_shape("T12", 12, 1024, 4096, 16, 32000, 32, 256, 256), gpt2_shape("GPT2", 8, 1024)};
}

const char* const kModes[] = {"fp32", "tf32", "bf16"};

// Uniform tokens in [1, vocab) (no padding, nothing ignored), as gpipe_bench's W2; a language
// model's are [N, T] tokens and [N, T] targets.
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
  if (s.lm) {
    std::vector<int64_t> targets(src.size());
    for (auto& t : targets) t = next();
    return {{Tensor::from_vector(src, gpipe::Shape{s.batch, s.src_len})},
            {Tensor::from_vector(targets, gpipe::Shape{s.batch, s.src_len})}};
  }
  return {{Tensor::from_vector(src, gpipe::Shape{s.batch, s.src_len}),
           Tensor::from_vector(tin, gpipe::Shape{s.batch, s.tgt_len})},
          {Tensor::from_vector(tout, gpipe::Shape{s.batch, s.tgt_len})}};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A JSON string literal: quotes, backslashes and control characters escaped.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

struct Result {
  double step_s = 0, tokens_per_s = 0, model_flops = 0, tflops = 0, peak_mb = 0;
  double loss_first = 0, loss_last = 0;
};

Result measure(const Shape2& s, Precision precision, bool tf32) {
  gpipe::cuda::set_allow_tf32(tf32);
  const Batch batch = token_batch(s, 1234);
  allocator_for(kGpu).reset_peak();
  Pipeline pipe(s.lm ? models::language_model(s.lm_config) : models::transformer(s.config),
                {.K = 1, .M = 1, .devices = {kGpu}, .precision = precision}, batch);
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
  Result r;
  r.step_s = seconds[seconds.size() / 2];
  double forward_flops = 0;
  for (const CellInfo& c : pipe.cells()) forward_flops += c.cost;
  r.model_flops = 3 * forward_flops;
  r.tflops = r.model_flops / r.step_s / 1e12;
  r.tokens_per_s = static_cast<double>(s.batch * (s.src_len + s.tgt_len)) / r.step_s;
  r.peak_mb = allocator_for(kGpu).stats().peak_total / 1e6;
  r.loss_first = losses.front();
  r.loss_last = losses.back();
  return r;
}

// One shape in one precision mode; returns false if it failed or a loss is not finite.
bool run(const Shape2& s, const std::string& mode, double peak, const std::string& device,
         bool json) {
  const Precision precision = mode == "bf16" ? Precision::kBFloat16 : Precision::kFloat32;
  Result r;
  std::string error;
  try {
    r = measure(s, precision, mode == "tf32");
  } catch (const std::exception& e) {
    error = e.what();
  }
  gpipe::cuda::set_allow_tf32(false);
  const bool finite = std::isfinite(r.loss_first) && std::isfinite(r.loss_last);
  const auto& c = s.config;
  if (json) {
    std::printf(
        "{\"shape\": \"%s\", \"model\": \"%s\", \"mode\": \"%s\", \"layers\": %ld, \"dim\": %ld, "
        "\"ffn\": %ld, \"heads\": %ld, \"vocab\": %ld, \"batch\": %ld, \"src_len\": %ld, "
        "\"tgt_len\": %ld, \"device\": %s, ",
        s.name, s.lm ? s.lm_config.arch.c_str() : "transformer", mode.c_str(),
        static_cast<long>(c.layers), static_cast<long>(c.dim), static_cast<long>(c.ffn),
        static_cast<long>(c.heads), static_cast<long>(c.vocab), static_cast<long>(s.batch),
        static_cast<long>(s.src_len), static_cast<long>(s.tgt_len), json_string(device).c_str());
    if (!error.empty()) {
      std::printf("\"error\": %s}\n", json_string(error).c_str());
    } else {
      char mfu[32] = "null";
      if (peak > 0) std::snprintf(mfu, sizeof mfu, "%.6f", r.tflops / peak);
      std::printf(
          "\"step_ms\": %.4f, \"tokens_per_s\": %.1f, \"model_flops\": %.6e, "
          "\"tflops\": %.4f, \"peak_tflops\": %.1f, \"mfu\": %s, \"peak_mb\": %.1f, "
          "\"loss_first\": %s, \"loss_last\": %s}\n",
          r.step_s * 1e3, r.tokens_per_s, r.model_flops, r.tflops, peak, mfu, r.peak_mb,
          finite ? std::to_string(r.loss_first).c_str() : "null",
          finite ? std::to_string(r.loss_last).c_str() : "null");
    }
    std::fflush(stdout);
  } else if (!error.empty()) {
    std::printf("%-4s %-5s FAILED: %s\n", s.name, mode.c_str(), error.c_str());
  } else {
    std::printf("%-4s %-5s step %8.3f ms  %10.0f tok/s  %7.2f TFLOP/s", s.name, mode.c_str(),
                r.step_s * 1e3, r.tokens_per_s, r.tflops);
    if (peak > 0) std::printf("  MFU %5.2f%% of %.1f", 100 * r.tflops / peak, peak);
    std::printf("  device peak %.1f MB  loss %.4f -> %.4f\n", r.peak_mb, r.loss_first, r.loss_last);
  }
  if (!error.empty())
    std::fprintf(stderr, "w2_bench: %s %s: %s\n", s.name, mode.c_str(), error.c_str());
  return error.empty() && finite;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    if (comma > at) out.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> shapes = {"W2", "T6"}, modes(std::begin(kModes), std::end(kModes));
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      shapes = {"W2"};
    } else if (a.rfind("--only=", 0) == 0 && a.find(':') != std::string::npos) {
      shapes = {a.substr(7, a.find(':') - 7)};  // "T6:bf16": that shape and mode alone
      modes = {a.substr(a.find(':') + 1)};
    } else if (a.rfind("--shapes=", 0) == 0) {
      shapes = split(a.substr(9));
    } else if (a.rfind("--modes=", 0) == 0) {
      modes = split(a.substr(8));
    } else if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr,
                   "w2_bench: unknown argument '%s' (expected --quick, --only=T6:bf16, "
                   "--shapes=W2,T6,T12,GPT2, --modes=fp32,tf32,bf16 or --json)\n",
                   argv[i]);
      return 2;
    }
  }
  std::vector<std::string> known_shapes;
  for (const Shape2& s : all_shapes()) known_shapes.push_back(s.name);
  for (const std::string& s : shapes)
    if (!contains(known_shapes, s)) {
      std::fprintf(stderr, "w2_bench: unknown shape '%s' (known: W2, T6, T12, GPT2)\n", s.c_str());
      return 2;
    }
  for (const std::string& m : modes)
    if (!contains(std::vector<std::string>(std::begin(kModes), std::end(kModes)), m)) {
      std::fprintf(stderr, "w2_bench: unknown mode '%s' (known: fp32, tf32, bf16)\n", m.c_str());
      return 2;
    }
  if (gpipe::cuda::device_count() == 0) {
    if (json)
      std::printf("{\"error\": \"no CUDA device found\"}\n");
    else
      std::printf("SKIPPED: no CUDA device found\n");
    return json ? 1 : 0;
  }
  const cudaDeviceProp& p = gpipe::cuda::device_properties(0);
  const gpipe::testing::Peaks peaks = gpipe::testing::device_peaks(p.name);
  if (!json)
    std::printf("device cuda:0 = %s; MFU: model FLOPs (3 x forward) / step / dense peak\n", p.name);
  bool ok = true;
  for (const Shape2& s : all_shapes()) {
    if (!contains(shapes, s.name)) continue;
    for (const std::string& m : modes) {
      const double peak = m == "fp32" ? peaks.fp32 : m == "tf32" ? peaks.tf32 : peaks.bf16;
      ok = run(s, m, peak, p.name, json) && ok;
    }
  }
  return ok ? 0 : 1;
}
