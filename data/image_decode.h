// PNG and JPEG decoding (and encoding, for tests and the data benchmark) into
// 8-bit HWC images, plus the pixel operations an image data set needs:
// channel conversion, resizing, center cropping.
//
//   Image img = read_image("cat.jpg");           // [H, W, 1 or 3] uint8
//   img = to_channels(img, 3);                    // gray -> RGB
//   img = resize_shorter_side(img, 32);           // area down, bilinear up
//   img = center_crop(img, 32, 32);
//
// The decoders are the system's: libpng and libjpeg-turbo (Debian's
// libpng-dev and libjpeg62-turbo-dev), maintained, fuzzed upstream, and
// libjpeg-turbo's SIMD JPEG path is among the fastest there is. Every error
// either library reports becomes one gpipe::Error naming the file; neither
// library ever calls exit() (Note [Decoder errors] in image_decode.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {

// An 8-bit image, rows top to bottom, pixels left to right, channels
// interleaved (HWC): pixels[(y * width + x) * channels + c].
struct Image {
  int64_t height = 0, width = 0, channels = 0;  // channels: 1 (gray) or 3 (RGB)
  std::vector<uint8_t> pixels;
  uint8_t at(int64_t y, int64_t x, int64_t c) const {
    return pixels[static_cast<size_t>((y * width + x) * channels + c)];
  }
};

// Decompression-bomb guard: an image whose header claims more pixels than
// this (64 megapixels, about 200 MB as RGB) is refused before any pixel
// memory is allocated.
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 26;
// Files larger than this are refused before they are read.
inline constexpr int64_t kMaxImageFileBytes = int64_t{1} << 28;

// Decodes a PNG (1/2/4/8/16-bit gray, gray+alpha, RGB, RGBA or palette;
// 16-bit samples keep their high byte, alpha is dropped, a palette becomes
// RGB) or a JPEG (gray stays gray, YCbCr becomes RGB) held in `bytes`; the
// format is told by its signature. `name` (the file) starts every error
// message. Throws gpipe::Error for an unknown signature, a corrupt or
// truncated stream, more than `max_pixels` pixels, or an unsupported kind
// (CMYK JPEG).
Image decode_image(const std::string& bytes, const std::string& name,
                   int64_t max_pixels = kMaxImagePixels);
// Reads `path` (at most kMaxImageFileBytes) and decodes it.
Image read_image(const std::string& path, int64_t max_pixels = kMaxImagePixels);
// A segmentation mask: a PNG of one channel whose values are class ids; a
// palette PNG gives its palette indices. Throws gpipe::Error naming `path`
// for a JPEG or an RGB PNG as well.
Image read_mask(const std::string& path, int64_t max_pixels = kMaxImagePixels);

// Encoders: 8-bit gray or RGB. Throw gpipe::Error naming `path` when it
// cannot be written.
std::string encode_png(const Image& img);
void write_png(const std::string& path, const Image& img);
std::string encode_jpeg(const Image& img, int quality = 90);
void write_jpeg(const std::string& path, const Image& img, int quality = 90);

// 1 or 3 channels: gray is repeated into R, G and B; RGB becomes its luma
// (0.299 R + 0.587 G + 0.114 B, rounded).
Image to_channels(const Image& img, int64_t channels);
// Scales so the shorter side is `side` (the longer one in proportion,
// rounded): area averaging on a side that shrinks, bilinear interpolation
// (pixel centres aligned) on one that grows. `nearest` instead picks the
// nearest source pixel (for label masks, whose values are class ids).
Image resize(const Image& img, int64_t height, int64_t width, bool nearest = false);
Image resize_shorter_side(const Image& img, int64_t side, bool nearest = false);
// The centred height x width window (the image must be at least that big).
Image center_crop(const Image& img, int64_t height, int64_t width);

}  // namespace gpipe
