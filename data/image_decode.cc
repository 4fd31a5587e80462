// PNG and JPEG through libpng and libjpeg-turbo, and separable resizing.
//
// Note [Decoder errors]
// Both libraries report a fatal error by calling a handler that must not
// return. We install handlers that copy the library's message into a state
// struct owned by the caller and longjmp back to a setjmp in a small
// function (png_decode, jpeg_decode, ...) that holds no C++ objects of its
// own: every buffer it fills lives in that caller-owned struct, so nothing
// with a destructor is skipped by the jump and no local of the setjmp frame
// is read after it. The function returns false, the caller frees the
// library's state and throws one gpipe::Error naming the file. Nothing calls
// exit(): libjpeg's default error_exit would, so it is always replaced.
// Warnings are ignored except libjpeg's "premature end of data", which for a
// file read whole means it is truncated.
#include "data/image_decode.h"

#include <png.h>
#include <setjmp.h>  // NOLINT(build/c++11): the decoders report errors by longjmp
#include <stdio.h>   // jpeglib.h needs FILE and size_t first
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

namespace gpipe {
namespace {

constexpr int kMaxJpegScans = 1000;  // a progressive JPEG has ~10; more is a scan bomb
constexpr size_t kMaxChunkBytes = 16u << 20;

bool has_prefix(const std::string& s, const char* p, size_t n) {
  return s.size() >= n && std::memcmp(s.data(), p, n) == 0;
}

// ---- PNG ----

struct PngState {
  const std::string* bytes = nullptr;
  size_t pos = 0;
  int64_t max_pixels = 0;
  bool indices = false;  // a palette image's indices, not its colours
  char message[256] = {};
  Image out;
  std::vector<png_bytep> rows;
  std::string* sink = nullptr;  // encoding
  const Image* in = nullptr;
};

[[noreturn]] void png_fail(png_structp png, png_const_charp msg) {
  auto* s = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(s->message, sizeof s->message, "%s", msg);
  png_longjmp(png, 1);
}
void png_quiet(png_structp, png_const_charp) {}

void png_read_bytes(png_structp png, png_bytep dst, png_size_t n) {
  auto* s = static_cast<PngState*>(png_get_io_ptr(png));
  if (s->bytes->size() - s->pos < n) png_error(png, "the file ends early (truncated)");
  std::memcpy(dst, s->bytes->data() + s->pos, n);
  s->pos += n;
}

// Returns false with the message set (Note [Decoder errors]).
bool png_decode(PngState* s, png_structp png, png_infop info) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, s, png_read_bytes);
  png_set_user_limits(png, 1u << 24, 1u << 24);
  png_set_chunk_malloc_max(png, kMaxChunkBytes);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (static_cast<int64_t>(w) * h > s->max_pixels) {
    std::snprintf(s->message, sizeof s->message,
                  "%u x %u pixels, more than the limit of %lld (expected a smaller image)", w, h,
                  static_cast<long long>(s->max_pixels));
    return false;
  }
  const int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE && s->indices) png_set_packing(png);
  if (color == PNG_COLOR_TYPE_PALETTE && !s->indices) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int channels = png_get_channels(png, info);
  if ((channels != 1 && channels != 3) || png_get_rowbytes(png, info) != size_t{w} * channels) {
    std::snprintf(s->message, sizeof s->message, "unsupported PNG layout (%d channels)", channels);
    return false;
  }
  s->out.height = h;
  s->out.width = w;
  s->out.channels = channels;
  s->out.pixels.resize(size_t{w} * h * channels);
  s->rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) s->rows[y] = s->out.pixels.data() + size_t{y} * w * channels;
  png_read_image(png, s->rows.data());
  return true;
}

Image decode_png(const std::string& bytes, const std::string& name, int64_t max_pixels,
                 bool indices = false) {
  PngState s;
  s.bytes = &bytes;
  s.max_pixels = max_pixels;
  s.indices = indices;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, png_fail, png_quiet);
  GPIPE_CHECK(png != nullptr, name, ": cannot start the PNG decoder (out of memory)");
  png_infop info = png_create_info_struct(png);
  const bool ok = info != nullptr && png_decode(&s, png, info);
  png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
  GPIPE_CHECK(ok, name, ": not a readable PNG: ", s.message[0] ? s.message : "out of memory");
  return std::move(s.out);
}

void png_write_bytes(png_structp png, png_bytep src, png_size_t n) {
  static_cast<PngState*>(png_get_io_ptr(png))->sink->append(reinterpret_cast<char*>(src), n);
}
void png_flush(png_structp) {}

bool png_encode(PngState* s, png_structp png, png_infop info) {
  if (setjmp(png_jmpbuf(png))) return false;
  const Image& img = *s->in;
  png_set_write_fn(png, s, png_write_bytes, png_flush);
  png_set_IHDR(png, info, static_cast<png_uint_32>(img.width), static_cast<png_uint_32>(img.height),
               8, img.channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int64_t y = 0; y < img.height; ++y)
    png_write_row(png, img.pixels.data() + y * img.width * img.channels);
  png_write_end(png, nullptr);
  return true;
}

// ---- JPEG ----

// Standard layout, `pub` first: the handlers get &pub and cast it back.
struct JpegErrors {
  jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

struct JpegState {
  JpegErrors e{};
  jpeg_progress_mgr progress{};
  jpeg_decompress_struct d{};
  jpeg_compress_struct c{};
  bool created = false;
  const std::string* bytes = nullptr;
  int64_t max_pixels = 0;
  Image out;
  const Image* in = nullptr;
  unsigned char* buffer = nullptr;  // encoding: jpeg_mem_dest's (malloc'd)
  unsigned long buffer_size = 0;    // NOLINT(runtime/int): libjpeg's type
};

[[noreturn]] void jpeg_fail(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  longjmp(e->jump, 1);
}

void jpeg_warning(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpeg_fail(cinfo);
}

void jpeg_scan_limit(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > kMaxJpegScans) {
    auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
    std::snprintf(e->message, sizeof e->message, "more than %d scans (a scan bomb)", kMaxJpegScans);
    longjmp(e->jump, 1);
  }
}

void jpeg_install_errors(JpegState* s, jpeg_common_struct* cinfo) {
  cinfo->err = jpeg_std_error(&s->e.pub);
  s->e.pub.error_exit = jpeg_fail;
  s->e.pub.emit_message = jpeg_warning;
}

// Returns false with the message set (Note [Decoder errors]).
bool jpeg_decode(JpegState* s) {
  jpeg_decompress_struct& d = s->d;
  jpeg_install_errors(s, reinterpret_cast<jpeg_common_struct*>(&d));
  if (setjmp(s->e.jump)) return false;
  jpeg_create_decompress(&d);
  s->created = true;
  s->progress.progress_monitor = jpeg_scan_limit;
  d.progress = &s->progress;
  jpeg_mem_src(&d, reinterpret_cast<const unsigned char*>(s->bytes->data()),
               static_cast<unsigned long>(s->bytes->size()));  // NOLINT(runtime/int)
  jpeg_read_header(&d, TRUE);
  if (static_cast<int64_t>(d.image_width) * d.image_height > s->max_pixels) {
    std::snprintf(s->e.message, sizeof s->e.message,
                  "%u x %u pixels, more than the limit of %lld (expected a smaller image)",
                  d.image_width, d.image_height, static_cast<long long>(s->max_pixels));
    return false;
  }
  d.out_color_space = d.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&d);
  const size_t row = size_t{d.output_width} * d.output_components;
  s->out.height = d.output_height;
  s->out.width = d.output_width;
  s->out.channels = d.output_components;
  s->out.pixels.resize(row * d.output_height);
  while (d.output_scanline < d.output_height) {
    JSAMPROW dst = s->out.pixels.data() + row * d.output_scanline;
    jpeg_read_scanlines(&d, &dst, 1);
  }
  return true;
}

bool jpeg_encode(JpegState* s, int quality) {
  jpeg_compress_struct& c = s->c;
  jpeg_install_errors(s, reinterpret_cast<jpeg_common_struct*>(&c));
  if (setjmp(s->e.jump)) return false;
  jpeg_create_compress(&c);
  s->created = true;
  const Image& img = *s->in;
  jpeg_mem_dest(&c, &s->buffer, &s->buffer_size);
  c.image_width = static_cast<JDIMENSION>(img.width);
  c.image_height = static_cast<JDIMENSION>(img.height);
  c.input_components = static_cast<int>(img.channels);
  c.in_color_space = img.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW src = const_cast<uint8_t*>(img.pixels.data()) +
                   size_t{c.next_scanline} * img.width * img.channels;
    jpeg_write_scanlines(&c, &src, 1);
  }
  jpeg_finish_compress(&c);
  return true;
}

void check_image(const Image& img, const char* what) {
  GPIPE_CHECK((img.channels == 1 || img.channels == 3) && img.height > 0 && img.width > 0 &&
                  img.pixels.size() == static_cast<size_t>(img.height * img.width * img.channels),
              what, ": expected a non-empty 1- or 3-channel image, got ", img.height, " x ",
              img.width, " x ", img.channels, " with ", img.pixels.size(), " bytes");
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  GPIPE_CHECK(f.good(), path, ": cannot write the image file");
}

// ---- resizing ----

// One output pixel along an axis: a weighted sum of source pixels.
struct Taps {
  std::vector<int64_t> first;  // first source index per output index
  std::vector<float> weights;  // `width` weights per output index
  int64_t width = 0;
};

Taps make_taps(int64_t in, int64_t out, bool nearest) {
  Taps t;
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  if (nearest || in == out) {
    t.width = 1;
    for (int64_t i = 0; i < out; ++i) {
      t.first.push_back(std::min(in - 1, static_cast<int64_t>((i + 0.5) * scale)));
      t.weights.push_back(1.0f);
    }
  } else if (out < in) {  // area: the source span [i * scale, (i + 1) * scale)
    t.width = static_cast<int64_t>(std::ceil(scale)) + 1;
    for (int64_t i = 0; i < out; ++i) {
      const double lo = i * scale, hi = (i + 1) * scale;
      const int64_t first = static_cast<int64_t>(lo);
      t.first.push_back(first);
      for (int64_t k = 0; k < t.width; ++k) {
        const double a = std::max(lo, static_cast<double>(first + k));
        const double b = std::min(hi, static_cast<double>(first + k + 1));
        t.weights.push_back(first + k < in && b > a ? static_cast<float>((b - a) / scale) : 0.f);
      }
    }
  } else {  // bilinear, pixel centres aligned, edges clamped
    t.width = 2;
    for (int64_t i = 0; i < out; ++i) {
      const double src = std::clamp((i + 0.5) * scale - 0.5, 0.0, static_cast<double>(in - 1));
      const int64_t first = std::min(static_cast<int64_t>(src), in - 2 < 0 ? 0 : in - 2);
      const float frac = static_cast<float>(src - static_cast<double>(first));
      t.first.push_back(first);
      t.weights.push_back(1.0f - frac);
      t.weights.push_back(in > 1 ? frac : 0.f);
    }
  }
  return t;
}

}  // namespace

Image decode_image(const std::string& bytes, const std::string& name, int64_t max_pixels) {
  if (has_prefix(bytes, "\x89PNG\r\n\x1a\n", 8)) return decode_png(bytes, name, max_pixels);
  GPIPE_CHECK(has_prefix(bytes, "\xff\xd8\xff", 3), name,
              ": not an image file (expected a PNG or JPEG signature at offset 0, got ",
              bytes.empty() ? "an empty file" : "other bytes", ")");
  JpegState s;
  s.bytes = &bytes;
  s.max_pixels = max_pixels;
  const bool ok = jpeg_decode(&s);
  if (s.created) jpeg_destroy_decompress(&s.d);
  GPIPE_CHECK(ok, name, ": not a readable JPEG: ", s.e.message);
  GPIPE_CHECK(s.out.channels == 1 || s.out.channels == 3, name, ": a JPEG with ", s.out.channels,
              " channels (expected gray or RGB)");
  return std::move(s.out);
}

namespace {
std::string read_image_file(const std::string& path) {
  struct stat st {};
  GPIPE_CHECK(::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode), path,
              ": cannot read the image (expected a readable file)");
  GPIPE_CHECK(st.st_size <= kMaxImageFileBytes, path, ": ", st.st_size,
              " bytes, more than the limit of ", kMaxImageFileBytes, " for an image file");
  std::ifstream f(path, std::ios::binary);
  GPIPE_CHECK(f.good(), path, ": cannot open the image file");
  std::ostringstream ss;
  ss << f.rdbuf();
  GPIPE_CHECK(!f.bad(), path, ": read error");
  return ss.str();
}
}  // namespace

Image read_image(const std::string& path, int64_t max_pixels) {
  return decode_image(read_image_file(path), path, max_pixels);
}

Image read_mask(const std::string& path, int64_t max_pixels) {
  const std::string bytes = read_image_file(path);
  GPIPE_CHECK(has_prefix(bytes, "\x89PNG\r\n\x1a\n", 8), path,
              ": not a PNG file (expected a PNG mask: its signature at offset 0)");
  Image m = decode_png(bytes, path, max_pixels, /*indices=*/true);
  GPIPE_CHECK(m.channels == 1, path, ": an RGB mask (expected gray or palette pixels: class ids)");
  return m;
}

std::string encode_png(const Image& img) {
  check_image(img, "encode_png");
  std::string out;
  PngState s;
  s.sink = &out;
  s.in = &img;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &s, png_fail, png_quiet);
  GPIPE_CHECK(png != nullptr, "encode_png: cannot start the PNG encoder");
  png_infop info = png_create_info_struct(png);
  const bool ok = info != nullptr && png_encode(&s, png, info);
  png_destroy_write_struct(&png, info != nullptr ? &info : nullptr);
  GPIPE_CHECK(ok, "encode_png: ", s.message);
  return out;
}

void write_png(const std::string& path, const Image& img) { write_bytes(path, encode_png(img)); }

std::string encode_jpeg(const Image& img, int quality) {
  check_image(img, "encode_jpeg");
  JpegState s;
  s.in = &img;
  const bool ok = jpeg_encode(&s, quality);
  std::string out;
  if (ok) out.assign(reinterpret_cast<char*>(s.buffer), s.buffer_size);
  if (s.created) jpeg_destroy_compress(&s.c);
  std::free(s.buffer);
  GPIPE_CHECK(ok, "encode_jpeg: ", s.e.message);
  return out;
}

void write_jpeg(const std::string& path, const Image& img, int quality) {
  write_bytes(path, encode_jpeg(img, quality));
}

Image to_channels(const Image& img, int64_t channels) {
  GPIPE_CHECK(channels == 1 || channels == 3, "expected 1 or 3 channels, got ", channels);
  if (img.channels == channels) return img;
  Image out{img.height, img.width, channels, {}};
  const size_t n = static_cast<size_t>(img.height * img.width);
  out.pixels.resize(n * channels);
  const uint8_t* p = img.pixels.data();
  if (channels == 3) {
    for (size_t i = 0; i < n; ++i)
      out.pixels[3 * i] = out.pixels[3 * i + 1] = out.pixels[3 * i + 2] = p[i];
  } else {
    for (size_t i = 0; i < n; ++i)
      out.pixels[i] = static_cast<uint8_t>(
          std::lround(0.299 * p[3 * i] + 0.587 * p[3 * i + 1] + 0.114 * p[3 * i + 2]));
  }
  return out;
}

Image resize(const Image& img, int64_t height, int64_t width, bool nearest) {
  check_image(img, "resize");
  GPIPE_CHECK(height > 0 && width > 0, "resize: expected a positive size, got ", height, " x ",
              width);
  if (height == img.height && width == img.width) return img;
  const int64_t c = img.channels;
  const Taps tx = make_taps(img.width, width, nearest), ty = make_taps(img.height, height, nearest);
  // Rows first (width), into floats; then columns (height).
  std::vector<float> mid(static_cast<size_t>(img.height * width * c));
  for (int64_t y = 0; y < img.height; ++y)
    for (int64_t x = 0; x < width; ++x)
      for (int64_t ch = 0; ch < c; ++ch) {
        float acc = 0;
        for (int64_t k = 0; k < tx.width; ++k) {
          const float w = tx.weights[x * tx.width + k];
          if (w != 0.f) acc += w * img.at(y, tx.first[x] + k, ch);
        }
        mid[(y * width + x) * c + ch] = acc;
      }
  Image out{height, width, c, std::vector<uint8_t>(static_cast<size_t>(height * width * c))};
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width * c; ++x) {
      float acc = 0;
      for (int64_t k = 0; k < ty.width; ++k) {
        const float w = ty.weights[y * ty.width + k];
        if (w != 0.f) acc += w * mid[(ty.first[y] + k) * width * c + x];
      }
      out.pixels[y * width * c + x] = static_cast<uint8_t>(std::clamp(std::lround(acc), 0L, 255L));
    }
  return out;
}

Image resize_shorter_side(const Image& img, int64_t side, bool nearest) {
  check_image(img, "resize");
  const bool tall = img.height >= img.width;
  const int64_t shorter = tall ? img.width : img.height, longer = tall ? img.height : img.width;
  const int64_t scaled = std::max<int64_t>(
      side, std::llround(static_cast<double>(longer) * side / static_cast<double>(shorter)));
  return tall ? resize(img, scaled, side, nearest) : resize(img, side, scaled, nearest);
}

Image center_crop(const Image& img, int64_t height, int64_t width) {
  GPIPE_CHECK(img.height >= height && img.width >= width, "center_crop: a ", img.height, " x ",
              img.width, " image is smaller than the ", height, " x ", width, " window");
  const int64_t top = (img.height - height) / 2, left = (img.width - width) / 2, c = img.channels;
  Image out{height, width, c, std::vector<uint8_t>(static_cast<size_t>(height * width * c))};
  for (int64_t y = 0; y < height; ++y)
    std::memcpy(out.pixels.data() + y * width * c,
                img.pixels.data() + ((top + y) * img.width + left) * c, width * c);
  return out;
}

}  // namespace gpipe
