// Fashion-MNIST (Xiao et al. 2017) from the gzip-compressed IDX files that
// Debian's dataset-fashion-mnist package installs, plus an epoch iterator that
// cuts it into shuffled batches.
//
//   ImageDataset train = load_fashion_mnist(kFashionMnistDir, /*train=*/true);
//   ImageBatcher batches(train, {.batch_size = 128, .seed = 1});
//   Batch b = batches.next();  // inputs {images [128,1,28,28]}, targets {labels [128]}
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/batch.h"

namespace gpipe {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr int64_t kFashionMnistClasses = 10;
inline constexpr int64_t kFashionMnistSide = 28;
// Pixel statistics of the 60,000 training images scaled to [0, 1].
inline constexpr double kFashionMnistMean = 0.2860;
inline constexpr double kFashionMnistStd = 0.3530;

struct ImageDataset {
  Tensor images;       // [N, 1, 28, 28] float32, CPU (undefined if not read)
  Tensor labels;       // [N] int64 in [0, 10), CPU (undefined if not read)
  int64_t count = -1;  // N when neither part was read (only counted)
  int64_t size() const {
    return labels.defined()   ? labels.size(0)
           : images.defined() ? images.size(0)
                              : std::max<int64_t>(count, 0);
  }
};

struct FashionMnistOptions {
  int64_t limit = -1;      // load only the first `limit` examples (< 0: all)
  bool normalize = false;  // false: pixels in [0, 1]; true: (x - mean) / std
  double mean = kFashionMnistMean;
  double std = kFashionMnistStd;
  // Which parts to read: a pipeline stage reads only what it consumes (the
  // first the images, the last the labels); with neither, only the count.
  bool images = true, labels = true;
};

// Reads <dir>/{train,t10k}-images-idx3-ubyte.gz and the matching labels file.
// Throws gpipe::Error naming the file and what was expected when a file is
// missing, not gzip/IDX, of the wrong kind (magic 2051 images / 2049 labels),
// of unexpected geometry (not 28x28), truncated, or when the image and label
// counts differ. The tensors are charged to MemoryCategory::kWorkspace: a
// data set is neither a parameter nor an activation of the model.
ImageDataset load_fashion_mnist(const std::string& dir, bool train,
                                const FashionMnistOptions& options = {});

// One decoded IDX array (big-endian header, uint8 payload).
struct IdxArray {
  std::vector<int64_t> dims;  // as in the header (dims[0] = item count in the file)
  std::vector<uint8_t> data;  // the first `limit` items (all when limit < 0)
};

// Reads a gzip-compressed (or plain) IDX file of unsigned bytes whose magic
// must be `expected_magic` (0x0803 = 2051 for images, 0x0801 = 2049 for
// labels); stops after `limit` items. Throws gpipe::Error naming `path`.
IdxArray read_idx_gz(const std::string& path, uint32_t expected_magic, int64_t limit = -1);

struct ImageBatchOptions {
  int64_t batch_size = 64;
  uint64_t seed = 0;      // epoch e is shuffled with mix_key(seed, e)
  bool shuffle = true;    // false: in order (evaluation)
  bool drop_last = true;  // true: every batch has exactly batch_size rows
};

// Endless epoch iterator over an ImageDataset: next() returns
// Batch{inputs = {images [B,1,28,28]}, targets = {labels [B]}} and moves to
// the next, reshuffled epoch when the current one is used up. Copies are
// independent iterators over the same (shared, read-only) tensors.
class ImageBatcher {
 public:
  ImageBatcher(ImageDataset data, ImageBatchOptions options);

  Batch next();
  int64_t batches_per_epoch() const { return sampler_.batches_per_epoch(); }
  int64_t epoch() const { return sampler_.epoch(); }  // epoch of the next batch
  const ImageDataset& dataset() const { return data_; }

 private:
  ImageDataset data_;
  EpochSampler sampler_;
};

// Adapter for PrefetchLoader: the batcher's batches for `epochs` epochs, then
// std::nullopt (epochs <= 0: endless).
BatchProducer image_batch_producer(ImageBatcher batcher, int64_t epochs = 0);

}  // namespace gpipe
