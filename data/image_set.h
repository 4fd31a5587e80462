// Preprocessing an ImageSource into model batches: each image is resized
// (shorter side to S, area averaging down, bilinear up) and center-cropped
// to S x S, converted to the set's channel count (1 or 3), optionally
// placed for augmentation (mirrored, shifted), and normalised per channel:
// (pixel / 255 - mean[c]) / std[c]. Masks take the same geometry with
// nearest-neighbour resizing.
//
//   auto source = std::make_shared<ImageFolderSource>(listing);
//   ImageNormalization norm = measure_normalization(*source, 32, /*channels=*/0);
//   ImageSet set(source, {.image_size = 32, .norm = norm});
//   Tensor x = set.images({0, 1, 2});   // [3, C, 32, 32] float32
//
// Decoding happens in whichever thread asks for a batch (PrefetchLoader's):
// nothing is decoded ahead. A bounded cache keeps fitted (resized, cropped)
// images up to `cache_bytes`, first come first kept, so a small data set is
// decoded once and a large one costs no more memory than the budget.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "data/image_folder.h"

namespace gpipe {

struct ImageNormalization {
  int64_t channels = 0;           // 1 or 3
  std::vector<double> mean, std;  // one per channel, of pixel / 255
};

// How an image is placed for augmentation: mirrored left-right, then moved
// down by dy and right by dx pixels (what a crop of the image padded by
// |shift| on each side picks); pixels moved in from outside are 0 after
// normalisation (the mean) in images and 0 (background) in masks.
struct ImagePlacement {
  bool flip = false;
  int64_t dy = 0, dx = 0;
};

// The placement of example `row` of step `step`'s batch under --augment:
// a pure function of (seed, step, row); shifts in [-max_shift, max_shift].
ImagePlacement augment_placement(uint64_t seed, int64_t step, int64_t row, int64_t max_shift);

// The channel count (3 if any sampled image has colour, else 1; `channels`
// when it is 1 or 3) and the per-channel mean and standard deviation of
// pixel / 255 over up to `max_images` images of `source` spread evenly
// over it (all of them when it has fewer), each fitted to `image_size`.
ImageNormalization measure_normalization(const ImageSource& source, int64_t image_size,
                                         int64_t channels, int64_t max_images = 2000);

struct ImageSetOptions {
  int64_t image_size = 32;
  ImageNormalization norm;                  // channels 1 or 3, mean and std of that size
  int64_t cache_bytes = int64_t{64} << 20;  // fitted images kept (0: none)
};

class ImageSet {
 public:
  // Throws gpipe::Error for a bad size, channel count or std <= 0.
  ImageSet(std::shared_ptr<const ImageSource> source, ImageSetOptions options);

  int64_t size() const { return source_->size(); }
  int64_t channels() const { return options_.norm.channels; }
  int64_t image_size() const { return options_.image_size; }
  const ImageSource& source() const { return *source_; }

  // [rows, C, S, S] float32, normalised; `place` empty or one per row.
  Tensor images(const std::vector<int64_t>& rows,
                const std::vector<ImagePlacement>& place = {}) const;
  // [rows] int64 class labels.
  Tensor labels(const std::vector<int64_t>& rows) const;
  // [rows, S, S] int64 mask class ids, fitted and placed like images()
  // (a mask of another size than its image is scaled alike, so it should
  // have the image's aspect ratio); throws gpipe::Error naming a mask with
  // an id >= `classes`.
  Tensor masks(const std::vector<int64_t>& rows, int64_t classes,
               const std::vector<ImagePlacement>& place = {}) const;

  // Example i resized, cropped and converted: S x S x C, uint8.
  Image fitted(int64_t i) const;

 private:
  std::shared_ptr<const ImageSource> source_;
  ImageSetOptions options_;
  mutable std::mutex mu_;
  mutable std::unordered_map<int64_t, std::shared_ptr<const Image>> cache_;
  mutable int64_t cached_bytes_ = 0;
};

// Example i of `source` fitted to side x side (shorter side scaled to
// `side`, centre cropped); `nearest` for masks.
Image fit_image(const Image& img, int64_t side, bool nearest = false);

}  // namespace gpipe
