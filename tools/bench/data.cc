// gpipe_bench data: can the loaders keep a 2-core training step fed?
//
// Image path: a folder of JPEGs generated in a temporary directory (libjpeg,
// two classes) read through ImageSet and PrefetchLoader exactly as
// gpipe_train --data does, with the decoded cache off (every batch decodes:
// the first epoch's cost, the worst case), at each --image-size. LM path: an
// llm.c token shard (data/token_shard.h) written there, rows of context + 1
// tokens read at shuffled offsets into [B, T] inputs and targets. Each is set
// against the examples (rows) per second a training step of the default model
// consumes on the same machine (AmoebaNet-D(N=1, F=32) on 3-channel images of
// that size; the default GPT-2-shaped LM, models::LmConfig{}), measured in the
// same run with K = 1 and all the threads; the ratio is loader / step (the
// goal is >= 10: the loader's thread then costs the step little).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "core/rng.h"
#include "data/batch.h"
#include "data/image_set.h"
#include "data/loader.h"
#include "data/token_shard.h"
#include "models/amoebanet.h"
#include "models/lm.h"
#include "optim/sgd.h"
#include "pipeline/pipeline.h"
#include "tools/bench/benchmarks.h"

namespace gpipe::bench {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A smooth random-ish picture (JPEG-friendly, not constant).
Image picture(int64_t h, int64_t w, uint64_t seed) {
  Image img{h, w, 3, std::vector<uint8_t>(static_cast<size_t>(h * w * 3))};
  const uint64_t k = mix_key(seed, 0x1a9e);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < 3; ++c)
        img.pixels[(y * w + x) * 3 + c] = static_cast<uint8_t>(
            (x * (1 + (k >> (c * 4)) % 5) + y * (1 + (k >> 20) % 3) + ((k >> (8 * c)) & 0xff)) %
            256);
  return img;
}

// Examples per second through PrefetchLoader for about `seconds`.
double loader_rate(BatchProducer producer, double seconds) {
  PrefetchLoader loader(std::move(producer), 2);
  (void)loader.next();  // the thread is started and the queue warm
  const auto t0 = Clock::now();
  int64_t examples = 0;
  while (since(t0) < seconds) examples += loader.next().value().inputs[0].size(0);
  return static_cast<double>(examples) / since(t0);
}

// Examples per second of training steps of `model` on `batch`.
double step_rate(Model model, const Batch& batch, int threads, int steps) {
  PipelineOptions po;
  po.threads_per_stage = threads;
  Pipeline pipe(std::move(model), po, batch);
  optim::Sgd opt(pipe.parameters(), optim::SgdOptions{.lr = 0.01, .momentum = 0.9});
  auto step = [&] {
    pipe.zero_grad();
    (void)pipe.train_step(batch);
    opt.step();
  };
  step();  // warm-up
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) step();
  return static_cast<double>(batch.inputs[0].size(0) * steps) / since(t0);
}

void report(const char* what, double loader, double step) {
  std::printf("%-34s %12.1f %12.1f %8.1fx %s\n", what, loader, step, loader / step,
              loader >= 10 * step ? "ok" : "below 10x");
}

void image_path(const DataBenchOptions& o, const std::string& dir, int64_t size) {
  // Sources a bit larger than the target, as photos are: 1.25x, 4:3.
  const int64_t h = size * 5 / 4, w = size * 5 / 3;
  const std::string root = detail::concat(dir, "/jpeg", size);
  for (int c = 0; c < 2; ++c) {
    std::filesystem::create_directories(detail::concat(root, "/class", c));
    for (int64_t i = 0; i < o.images / 2; ++i)
      write_jpeg(detail::concat(root, "/class", c, "/", i, ".jpg"), picture(h, w, c * 100003 + i),
                 90);
  }
  auto source = std::make_shared<ImageFolderSource>(list_image_folder(root, "--data"));
  const ImageSet set(
      source,
      {.image_size = size, .norm = {3, {0.5, 0.5, 0.5}, {0.25, 0.25, 0.25}}, .cache_bytes = 0});
  const int64_t batch = o.batch;
  const double loader = loader_rate(
      [&set, batch, size, n = set.size(), s = int64_t{0}]() mutable -> std::optional<Batch> {
        std::vector<int64_t> rows = epoch_order(n, 1, s / (n / batch), true);
        rows.resize(static_cast<size_t>(batch));
        std::vector<ImagePlacement> place;
        for (int64_t r = 0; r < batch; ++r) place.push_back(augment_placement(1, s, r, size / 8));
        ++s;
        return Batch{{set.images(rows, place)}, {set.labels(rows)}};
      },
      o.seconds);
  models::AmoebaNetConfig a;
  a.in_channels = 3;
  a.num_classes = 10;
  const std::vector<int64_t> rows = [&] {
    std::vector<int64_t> r;
    for (int64_t i = 0; i < batch; ++i) r.push_back(i % set.size());
    return r;
  }();
  const Tensor labels = Tensor::zeros(Shape{batch}, DType::kInt64);
  const double step =
      step_rate(models::amoebanet(a), Batch{{set.images(rows)}, {labels}}, o.threads, o.steps);
  report(detail::concat("JPEG folder, --image-size ", size, " (ex/s)").c_str(), loader, step);
}

void lm_path(const DataBenchOptions& o, const std::string& dir) {
  const models::LmConfig m;  // the default LM (gpipe_train --model=gpt2)
  const int64_t t = m.context, batch = o.lm_batch;
  std::vector<int64_t> tokens(static_cast<size_t>(o.tokens));
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int64_t>(mix_key(7, i) % static_cast<uint64_t>(m.vocab));
  const std::string path = dir + "/tokens.bin";
  write_token_shard(path, tokens, 1);
  const TokenShard shard(path);
  const int64_t rows_in_shard = (shard.size() - 1) / t;
  auto make = [&shard, t, rows_in_shard, batch](int64_t s) {
    Tensor x = Tensor::zeros(Shape{batch, t}, DType::kInt64);
    Tensor y = Tensor::zeros(Shape{batch, t}, DType::kInt64);
    std::vector<int64_t> span;
    for (int64_t r = 0; r < batch; ++r) {
      const int64_t row = static_cast<int64_t>(
          mix_key(static_cast<uint64_t>(s), static_cast<uint64_t>(r)) % rows_in_shard);
      shard.read(row * t, t + 1, span);
      std::copy(span.begin(), span.end() - 1, x.data<int64_t>() + r * t);
      std::copy(span.begin() + 1, span.end(), y.data<int64_t>() + r * t);
    }
    return Batch{{x}, {y}};
  };
  const double loader = loader_rate(
      [&make, s = int64_t{0}]() mutable -> std::optional<Batch> { return make(s++); }, o.seconds);
  const double step = step_rate(models::language_model(m), make(0), o.threads, o.steps);
  report("LM token shard, context 128 (rows/s)", loader, step);
}

}  // namespace

int run_data(const DataBenchOptions& o) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("gpipe_bench_data_" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  std::printf(
      "# loader (PrefetchLoader, 1 producer thread, no decoded cache) vs a training step "
      "of the default model (K=1, %d threads, batch %ld / LM %ld)\n",
      o.threads, static_cast<long>(o.batch), static_cast<long>(o.lm_batch));
  std::printf("%-34s %12s %12s %9s\n", "path", "loader", "step", "ratio");
  try {
    for (int64_t size : o.sizes) image_path(o, dir, size);
    lm_path(o, dir);
  } catch (...) {
    std::filesystem::remove_all(dir);
    throw;
  }
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace gpipe::bench
