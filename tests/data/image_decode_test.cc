#include "data/image_decode.h"

#include <png.h>

#include <catch2/catch.hpp>
#include <cstdio>

#include "core/error.h"
#include "tests/test_util.h"

using namespace gpipe;
using Catch::Matchers::Contains;

namespace {

Image gradient(int64_t h, int64_t w, int64_t c) {
  Image img{h, w, c, std::vector<uint8_t>(static_cast<size_t>(h * w * c))};
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t k = 0; k < c; ++k)
        img.pixels[(y * w + x) * c + k] = static_cast<uint8_t>((y * 16 + x * 4 + k * 50) % 256);
  return img;
}

// A PNG of any colour type and depth through libpng's own writer (16-bit
// samples hold v * 257, alpha 128).
std::string png_of(int64_t h, int64_t w, int color, int depth, const std::vector<uint8_t>& gray) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep d, png_size_t n) {
        static_cast<std::string*>(png_get_io_ptr(p))->append(reinterpret_cast<char*>(d), n);
      },
      nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(w), static_cast<png_uint_32>(h), depth, color,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  std::vector<png_color> palette(256);
  for (int i = 0; i < 256; ++i)
    palette[i] = {static_cast<png_byte>(i), static_cast<png_byte>(255 - i), 7};
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_PLTE(png, info, palette.data(), 256);
  png_write_info(png, info);
  const int channels = color == PNG_COLOR_TYPE_RGBA         ? 4
                       : color == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                                                            : 1;
  const int bytes = depth / 8;
  for (int64_t y = 0; y < h; ++y) {
    std::vector<uint8_t> row(static_cast<size_t>(w * channels * bytes));
    for (int64_t x = 0; x < w; ++x)
      for (int k = 0; k < channels; ++k) {
        const uint8_t v = k == channels - 1 && channels % 2 == 0 ? 128 : gray[y * w + x];
        for (int b = 0; b < bytes; ++b) row[((x * channels + k) * bytes) + b] = v;
      }
    png_write_row(png, row.data());
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

}  // namespace

TEST_CASE("PNG round-trips 8-bit gray and RGB exactly", "[data][image]") {
  for (int64_t c : {1, 3}) {
    const Image img = gradient(5, 7, c);
    const Image back = decode_image(encode_png(img), "x.png");
    CHECK(back.height == 5);
    CHECK(back.width == 7);
    CHECK(back.channels == c);
    CHECK(back.pixels == img.pixels);
  }
}

TEST_CASE("PNG 16-bit, alpha and palette decode to 8-bit gray or RGB", "[data][image]") {
  std::vector<uint8_t> gray(12);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = static_cast<uint8_t>(i * 20);
  const Image g16 = decode_image(png_of(3, 4, PNG_COLOR_TYPE_GRAY, 16, gray), "g16.png");
  CHECK(g16.channels == 1);
  CHECK(g16.pixels == gray);
  const Image ga = decode_image(png_of(3, 4, PNG_COLOR_TYPE_GRAY_ALPHA, 8, gray), "ga.png");
  CHECK(ga.channels == 1);
  CHECK(ga.pixels == gray);
  const Image rgba = decode_image(png_of(3, 4, PNG_COLOR_TYPE_RGBA, 8, gray), "rgba.png");
  CHECK(rgba.channels == 3);
  CHECK(rgba.at(2, 3, 0) == gray[11]);
  const std::string pal = png_of(3, 4, PNG_COLOR_TYPE_PALETTE, 8, gray);
  const Image colours = decode_image(pal, "pal.png");
  CHECK(colours.channels == 3);
  CHECK(colours.at(1, 1, 1) == 255 - gray[5]);
  const std::string dir = testing::scratch_dir("palette_mask");
  testing::write_file(dir + "/m.png", pal);
  const Image indices = read_mask(dir + "/m.png");
  CHECK(indices.channels == 1);
  CHECK(indices.pixels == gray);
}

TEST_CASE("JPEG round-trips within the codec's error", "[data][image]") {
  Image img{16, 24, 3, std::vector<uint8_t>(16 * 24 * 3)};  // smooth: no edges to ring
  for (int64_t y = 0; y < 16; ++y)
    for (int64_t x = 0; x < 24; ++x)
      for (int64_t k = 0; k < 3; ++k) img.pixels[(y * 24 + x) * 3 + k] = y * 6 + x * 3 + k * 30;
  const Image back = decode_image(encode_jpeg(img, 95), "x.jpg");
  REQUIRE(back.channels == 3);
  REQUIRE(back.pixels.size() == img.pixels.size());
  double err = 0;
  for (size_t i = 0; i < img.pixels.size(); ++i) err += std::abs(img.pixels[i] - back.pixels[i]);
  CHECK(err / static_cast<double>(img.pixels.size()) < 3);
  CHECK(decode_image(encode_jpeg(gradient(8, 8, 1)), "g.jpg").channels == 1);
}

TEST_CASE("corrupt, truncated and oversized images give one error naming the file",
          "[data][image]") {
  const std::string png = encode_png(gradient(20, 20, 3));
  const std::string jpg = encode_jpeg(gradient(20, 20, 3));
  CHECK_THROWS_WITH(decode_image(png.substr(0, png.size() / 2), "cut.png"),
                    Contains("cut.png") && Contains("not a readable PNG"));
  CHECK_THROWS_WITH(decode_image(jpg.substr(0, jpg.size() / 2), "cut.jpg"),
                    Contains("cut.jpg") && Contains("not a readable JPEG"));
  CHECK_THROWS_WITH(decode_image("GIF89a....", "a.gif"),
                    Contains("a.gif") && Contains("PNG or JPEG signature"));
  CHECK_THROWS_WITH(decode_image(png, "big.png", 399), Contains("big.png") && Contains("limit"));
  CHECK_THROWS_WITH(decode_image(jpg, "big.jpg", 399), Contains("big.jpg") && Contains("limit"));
  std::string bad = jpg;
  for (size_t i = bad.size() / 3; i < bad.size() / 3 + 40; ++i) bad[i] = '\xff';
  CHECK_THROWS_AS(decode_image(bad.substr(0, 30), "hdr.jpg"), Error);
  CHECK_THROWS_WITH(read_image("/nonexistent/x.png"), Contains("/nonexistent/x.png"));
}

TEST_CASE("resizing: area averages down, bilinear interpolates up, crops centre", "[data][image]") {
  Image img{2, 4, 1, {0, 100, 200, 40, 0, 100, 200, 40}};
  const Image half = resize(img, 1, 2);
  CHECK(half.pixels == std::vector<uint8_t>{50, 120});
  const Image up = resize(Image{1, 2, 1, {0, 200}}, 1, 4);
  CHECK(up.pixels == std::vector<uint8_t>{0, 50, 150, 200});
  const Image tall = resize_shorter_side(gradient(40, 20, 3), 10);
  CHECK(tall.height == 20);
  CHECK(tall.width == 10);
  const Image crop = center_crop(gradient(6, 8, 1), 2, 4);
  CHECK(crop.at(0, 0, 0) == gradient(6, 8, 1).at(2, 2, 0));
  CHECK(to_channels(Image{1, 1, 3, {255, 0, 0}}, 1).pixels == std::vector<uint8_t>{76});
  CHECK(to_channels(Image{1, 1, 1, {9}}, 3).pixels == std::vector<uint8_t>{9, 9, 9});
  const Image mask = resize(Image{1, 2, 1, {0, 3}}, 1, 4, /*nearest=*/true);
  CHECK(mask.pixels == std::vector<uint8_t>{0, 0, 3, 3});
}
