// Fitting, caching, augmenting and normalising images into batch tensors.
// The float conversion and the placement are one pass over each output
// pixel: out[c][y][x] = (in[y + dy][flip(x) + dx][c] / 255 - mean) / std,
// or 0 outside the image.
#include "data/image_set.h"

#include <algorithm>
#include <cmath>

#include "core/allocator.h"
#include "core/error.h"
#include "core/rng.h"

namespace gpipe {

Image fit_image(const Image& img, int64_t side, bool nearest) {
  return center_crop(resize_shorter_side(img, side, nearest), side, side);
}

ImagePlacement augment_placement(uint64_t seed, int64_t step, int64_t row, int64_t max_shift) {
  const uint64_t coin =
      mix_key(mix_key(seed ^ 0xf11b, static_cast<uint64_t>(step)), static_cast<uint64_t>(row));
  const uint64_t span = static_cast<uint64_t>(2 * max_shift + 1);
  return {static_cast<bool>(coin & 1), static_cast<int64_t>((coin >> 8) % span) - max_shift,
          static_cast<int64_t>((coin >> 24) % span) - max_shift};
}

ImageNormalization measure_normalization(const ImageSource& source, int64_t image_size,
                                         int64_t channels, int64_t max_images) {
  GPIPE_CHECK(source.size() > 0, "the training data has no images");
  const int64_t n = std::min(source.size(), std::max<int64_t>(1, max_images));
  std::vector<Image> sample;
  sample.reserve(n);
  bool colour = false;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = k * source.size() / n;
    sample.push_back(fit_image(source.image(i), image_size));
    colour = colour || sample.back().channels == 3;
  }
  ImageNormalization norm;
  norm.channels = channels == 1 || channels == 3 ? channels : (colour ? 3 : 1);
  std::vector<double> sum(norm.channels, 0.0), sq(norm.channels, 0.0);
  int64_t count = 0;
  for (const Image& raw : sample) {
    const Image img = to_channels(raw, norm.channels);
    for (size_t p = 0; p < img.pixels.size(); ++p) {
      const double v = img.pixels[p] / 255.0;
      sum[p % norm.channels] += v;
      sq[p % norm.channels] += v * v;
    }
    count += img.height * img.width;
  }
  for (int64_t c = 0; c < norm.channels; ++c) {
    const double mean = sum[c] / static_cast<double>(count);
    const double var = sq[c] / static_cast<double>(count) - mean * mean;
    norm.mean.push_back(mean);
    norm.std.push_back(std::max(std::sqrt(std::max(var, 0.0)), 1e-3));  // a flat image: no 1/0
  }
  return norm;
}

ImageSet::ImageSet(std::shared_ptr<const ImageSource> source, ImageSetOptions options)
    : source_(std::move(source)), options_(std::move(options)) {
  GPIPE_ASSERT(source_ != nullptr);
  const ImageNormalization& n = options_.norm;
  GPIPE_CHECK(options_.image_size >= 1, "--image-size: expected a positive size, got ",
              options_.image_size);
  GPIPE_CHECK(n.channels == 1 || n.channels == 3, "expected 1 or 3 image channels, got ",
              n.channels);
  GPIPE_CHECK(static_cast<int64_t>(n.mean.size()) == n.channels, "--mean: expected ", n.channels,
              " value", n.channels > 1 ? "s (one per channel)" : "", ", got ", n.mean.size());
  GPIPE_CHECK(static_cast<int64_t>(n.std.size()) == n.channels, "--std: expected ", n.channels,
              " value", n.channels > 1 ? "s (one per channel)" : "", ", got ", n.std.size());
  for (double s : n.std) GPIPE_CHECK(s > 0, "--std: expected positive values, got ", s);
}

Image ImageSet::fitted(int64_t i) const {
  GPIPE_ASSERT(i >= 0 && i < size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(i); it != cache_.end()) return *it->second;
  }
  auto img = std::make_shared<const Image>(
      to_channels(fit_image(source_->image(i), options_.image_size), channels()));
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t bytes = static_cast<int64_t>(img->pixels.size());
  if (cached_bytes_ + bytes <= options_.cache_bytes && cache_.emplace(i, img).second)
    cached_bytes_ += bytes;
  return *img;
}

Tensor ImageSet::images(const std::vector<int64_t>& rows,
                        const std::vector<ImagePlacement>& place) const {
  GPIPE_ASSERT(place.empty() || place.size() == rows.size());
  MemoryCategoryGuard cat(MemoryCategory::kWorkspace);
  const int64_t b = static_cast<int64_t>(rows.size()), c = channels(), s = image_size();
  Tensor out = Tensor::zeros(Shape{b, c, s, s});
  float* dst = out.data<float>();
  std::vector<float> scale(c), shift(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    scale[ch] = static_cast<float>(1.0 / (255.0 * options_.norm.std[ch]));
    shift[ch] = static_cast<float>(-options_.norm.mean[ch] / options_.norm.std[ch]);
  }
  for (int64_t r = 0; r < b; ++r) {
    const Image img = fitted(rows[r]);
    const ImagePlacement p = place.empty() ? ImagePlacement{} : place[r];
    for (int64_t y = 0; y < s; ++y) {
      const int64_t sy = y - p.dy;
      if (sy < 0 || sy >= s) continue;
      for (int64_t x = 0; x < s; ++x) {
        int64_t sx = x - p.dx;
        if (sx < 0 || sx >= s) continue;
        if (p.flip) sx = s - 1 - sx;
        const uint8_t* px = img.pixels.data() + (sy * s + sx) * c;
        for (int64_t ch = 0; ch < c; ++ch)
          dst[((r * c + ch) * s + y) * s + x] = px[ch] * scale[ch] + shift[ch];
      }
    }
  }
  return out;
}

Tensor ImageSet::labels(const std::vector<int64_t>& rows) const {
  MemoryCategoryGuard cat(MemoryCategory::kWorkspace);
  Tensor out = Tensor::zeros(Shape{static_cast<int64_t>(rows.size())}, DType::kInt64);
  int64_t* dst = out.data<int64_t>();
  for (size_t r = 0; r < rows.size(); ++r) dst[r] = source_->label(rows[r]);
  return out;
}

Tensor ImageSet::masks(const std::vector<int64_t>& rows, int64_t classes,
                       const std::vector<ImagePlacement>& place) const {
  GPIPE_ASSERT(place.empty() || place.size() == rows.size());
  MemoryCategoryGuard cat(MemoryCategory::kWorkspace);
  const int64_t b = static_cast<int64_t>(rows.size()), s = image_size();
  Tensor out = Tensor::zeros(Shape{b, s, s}, DType::kInt64);
  int64_t* dst = out.data<int64_t>();
  for (int64_t r = 0; r < b; ++r) {
    const Image m = fit_image(source_->mask(rows[r]), s, /*nearest=*/true);
    const ImagePlacement p = place.empty() ? ImagePlacement{} : place[r];
    for (int64_t y = 0; y < s; ++y)
      for (int64_t x = 0; x < s; ++x) {
        const int64_t sy = y - p.dy;
        int64_t sx = x - p.dx;
        if (sy < 0 || sy >= s || sx < 0 || sx >= s) continue;
        if (p.flip) sx = s - 1 - sx;
        const int64_t id = m.pixels[sy * s + sx];
        GPIPE_CHECK(id < classes, source_->name(rows[r]), ": its mask has class id ", id,
                    " (expected < ", classes,
                    ", the classes the training masks hold or --classes)");
        dst[(r * s + y) * s + x] = id;
      }
  }
  return out;
}

}  // namespace gpipe
