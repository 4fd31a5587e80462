// IDX reader and Fashion-MNIST loader.
//
// An IDX file is a big-endian header -- magic (0x00 0x00 type ndims, type
// 0x08 = unsigned byte), then ndims uint32 sizes -- followed by the payload.
// zlib's gzread reads the .gz files (and plain files transparently), so a
// `limit` stops decompression early: loading 100 examples for a test costs
// microseconds, not the 0.5 s of inflating all 47 MB.
#include "data/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/allocator.h"

namespace gpipe {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads up to `n` bytes of `what`; returns how many were read (short at end
// of file). A gzip stream cut short is reported as truncation.
size_t read_some(gzFile f, const std::string& path, const char* what, void* buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
    const int got = gzread(f, static_cast<char*>(buf) + done, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      if (errnum == Z_BUF_ERROR)
        throw Error(detail::concat(path, ": truncated: the gzip stream ends inside the ", what,
                                   " (expected ", n, " bytes)"));
      throw Error(
          detail::concat(path, ": corrupt gzip data (", msg ? msg : "unknown zlib error", ")"));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

const char* kind_of(uint32_t magic) {
  switch (magic) {
    case 0x0803:
      return " (images)";
    case 0x0801:
      return " (labels)";
    default:
      return "";
  }
}

std::string file_name(const std::string& dir, bool train, const char* kind) {
  return (std::filesystem::path(dir) /
          (std::string(train ? "train" : "t10k") + "-" + kind + "-ubyte.gz"))
      .string();
}

}  // namespace

// The largest IDX payload read: 1 TiB (Fashion-MNIST's is 47 MB); a larger
// header is corrupt.
constexpr int64_t kMaxIdxBytes = int64_t{1} << 40;

IdxArray read_idx_gz(const std::string& path, uint32_t expected_magic, int64_t limit) {
  std::error_code ec;
  GPIPE_CHECK(std::filesystem::is_regular_file(path, ec), path,
              ": no such file (expected an IDX file with magic ", expected_magic,
              kind_of(expected_magic),
              "; Fashion-MNIST comes from Debian's dataset-fashion-mnist package)");
  GzFile f(gzopen(path.c_str(), "rb"));
  GPIPE_CHECK(f != nullptr, path, ": cannot open (", std::strerror(errno), ")");

  uint8_t head[4];
  size_t got = read_some(f.get(), path, "header", head, 4);
  GPIPE_CHECK(got == 4, path, ": truncated: expected a 4-byte IDX header with magic ",
              expected_magic, kind_of(expected_magic), ", got ", got, " bytes");
  const uint32_t magic = big_endian_u32(head);
  GPIPE_CHECK(magic == expected_magic, path, ": expected IDX magic ", expected_magic,
              kind_of(expected_magic), ", got ", magic, kind_of(magic));

  IdxArray out;
  const int ndims = head[3];
  std::vector<uint8_t> sizes(static_cast<size_t>(ndims) * 4);
  got = read_some(f.get(), path, "header", sizes.data(), sizes.size());
  GPIPE_CHECK(got == sizes.size(), path, ": truncated: expected ", ndims,
              " dimension sizes in the header, got ", got, " of ", sizes.size(), " bytes");
  for (int d = 0; d < ndims; ++d)
    out.dims.push_back(static_cast<int64_t>(big_endian_u32(&sizes[static_cast<size_t>(d) * 4])));
  // Empty axes count as 1 here, so a zero size cannot hide sizes whose
  // strides would overflow.
  GPIPE_CHECK(bounded_extent(out.dims, kMaxIdxBytes).has_value(), path,
              ": implausible IDX dimensions ", Shape(out.dims), " (over ", kMaxIdxBytes,
              " bytes, empty axes counted as 1)");
  const int64_t item_size =
      Shape(std::vector<int64_t>(out.dims.begin() + std::min(ndims, 1), out.dims.end())).numel();
  const int64_t count = ndims > 0 ? out.dims[0] : 1;
  const int64_t items = limit < 0 ? count : std::min(limit, count);
  int64_t want_bytes = 0;
  GPIPE_CHECK(!__builtin_mul_overflow(items, item_size, &want_bytes) && want_bytes <= kMaxIdxBytes,
              path, ": implausible IDX data size (", items, " items of ", item_size,
              " bytes, over ", kMaxIdxBytes, " bytes)");
  // Read in blocks, so a header that promises more than the file holds is
  // reported as truncation without first allocating what it promised.
  const size_t want = static_cast<size_t>(want_bytes);
  got = 0;
  while (got < want) {
    const size_t block = std::min<size_t>(want - got, size_t{64} << 20);
    out.data.resize(got + block);
    const size_t n = read_some(f.get(), path, "data", out.data.data() + got, block);
    got += n;
    if (n < block) break;
  }
  out.data.resize(got);
  GPIPE_CHECK(got == want, path, ": truncated: expected ", want, " bytes of data for ", items,
              " items, got ", got);
  return out;
}

ImageDataset load_fashion_mnist(const std::string& dir, bool train,
                                const FashionMnistOptions& options) {
  const std::string image_path = file_name(dir, train, "images-idx3");
  const std::string label_path = file_name(dir, train, "labels-idx1");
  const int64_t side = kFashionMnistSide;
  GPIPE_CHECK(options.std > 0, "load_fashion_mnist: std must be positive, got ", options.std);
  MemoryCategoryGuard guard(MemoryCategory::kWorkspace);
  ImageDataset ds;
  int64_t image_count = -1, label_count = -1;
  if (options.images) {
    IdxArray images = read_idx_gz(image_path, 0x0803, options.limit);
    GPIPE_CHECK(images.dims.size() == 3 && images.dims[1] == side && images.dims[2] == side,
                image_path, ": expected images of shape [N, 28, 28], got ", Shape(images.dims));
    image_count = images.dims[0];
    const int64_t n = static_cast<int64_t>(images.data.size() / (side * side));
    ds.images = Tensor::empty(Shape{n, 1, side, side}, DType::kFloat32);
    float* px = ds.images.data<float>();
    const float scale =
        options.normalize ? static_cast<float>(1.0 / (255.0 * options.std)) : 1.0f / 255.0f;
    const float shift = options.normalize ? static_cast<float>(options.mean / options.std) : 0.0f;
    for (size_t i = 0; i < images.data.size(); ++i)
      px[i] = static_cast<float>(images.data[i]) * scale - shift;
  }
  if (options.labels || !options.images) {
    // Without either part, the label file's header still gives the count.
    IdxArray labels = read_idx_gz(label_path, 0x0801, options.labels ? options.limit : 0);
    GPIPE_CHECK(labels.dims.size() == 1, label_path, ": expected labels of shape [N], got ",
                Shape(labels.dims));
    label_count = labels.dims[0];
    if (options.labels) {
      const int64_t n = static_cast<int64_t>(labels.data.size());
      ds.labels = Tensor::empty(Shape{n}, DType::kInt64);
      int64_t* lb = ds.labels.data<int64_t>();
      for (int64_t i = 0; i < n; ++i) {
        GPIPE_CHECK(labels.data[i] < kFashionMnistClasses, label_path, ": label ",
                    int{labels.data[i]}, " of example ", i, " is out of range; expected 0..9");
        lb[i] = labels.data[i];
      }
    }
  }
  if (image_count >= 0 && label_count >= 0)
    GPIPE_CHECK(image_count == label_count, image_path, " holds ", image_count, " images but ",
                label_path, " holds ", label_count, " labels; expected equal counts");
  const int64_t total = std::max(image_count, label_count);
  ds.count = options.limit >= 0 ? std::min(options.limit, total) : total;
  return ds;
}

ImageBatcher::ImageBatcher(ImageDataset data, ImageBatchOptions options)
    : data_(std::move(data)),
      sampler_(data_.size(), options.batch_size, options.seed, options.shuffle, options.drop_last) {
  GPIPE_CHECK(data_.images.defined() && data_.images.size(0) == data_.size(),
              "ImageBatcher: expected images and labels with the same number of rows");
}

Batch ImageBatcher::next() {
  const std::vector<int64_t> rows = sampler_.next_rows();
  return Batch{{gather_rows(data_.images, rows)}, {gather_rows(data_.labels, rows)}};
}

BatchProducer image_batch_producer(ImageBatcher batcher, int64_t epochs) {
  return [batcher = std::move(batcher), epochs]() mutable -> std::optional<Batch> {
    if (epochs > 0 && batcher.epoch() >= epochs) return std::nullopt;
    return batcher.next();
  };
}

}  // namespace gpipe
