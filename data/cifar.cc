// CIFAR binary batches: fixed-size records, read whole, checked record by
// record (a label byte out of range means the file is not what it claims).
#include "data/cifar.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace gpipe {
namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

// Appends the records of `path`: `label_bytes` label bytes (the one at
// `label_at` is used) then kCifarPixels pixel bytes each.
void read_batch(const std::string& path, int64_t label_bytes, int64_t label_at, int64_t classes,
                CifarRecords& out) {
  std::ifstream f(path, std::ios::binary);
  GPIPE_CHECK(f.good(), path, ": cannot open the CIFAR batch file");
  std::ostringstream ss;
  ss << f.rdbuf();
  const std::string bytes = ss.str();
  const int64_t record = label_bytes + kCifarPixels;
  const int64_t n = static_cast<int64_t>(bytes.size()) / record;
  GPIPE_CHECK(!bytes.empty(), path, ": empty file (expected CIFAR records of ", record, " bytes)");
  GPIPE_CHECK(static_cast<int64_t>(bytes.size()) % record == 0, path, ": truncated: record ", n,
              " at byte offset ", n * record, " has ", bytes.size() - n * record, " of its ",
              record, " bytes (expected whole records of ", label_bytes, " label byte",
              label_bytes > 1 ? "s" : "", " + 3072 pixels)");
  const size_t base = out.pixels.size();
  out.pixels.resize(base + static_cast<size_t>(n * kCifarPixels));
  for (int64_t r = 0; r < n; ++r) {
    const auto* rec = reinterpret_cast<const uint8_t*>(bytes.data()) + r * record;
    GPIPE_CHECK(rec[label_at] < classes, path, ": record ", r, " (byte offset ", r * record,
                ") has label ", int{rec[label_at]}, " (expected < ", classes, ")");
    out.labels.push_back(rec[label_at]);
    std::copy(rec + label_bytes, rec + record,
              out.pixels.begin() + static_cast<std::ptrdiff_t>(base + r * kCifarPixels));
  }
  out.origin.push_back(path);
}

}  // namespace

bool is_cifar_folder(const std::string& dir) {
  return is_file(join(dir, "data_batch_1.bin")) || is_file(join(dir, "train.bin"));
}

Image CifarSource::image(int64_t i) const {
  GPIPE_ASSERT(i >= 0 && i < size());
  constexpr int64_t plane = kCifarSide * kCifarSide;
  Image img{kCifarSide, kCifarSide, 3, std::vector<uint8_t>(kCifarPixels)};
  const uint8_t* src = records_->pixels.data() + i * kCifarPixels;
  for (int64_t p = 0; p < plane; ++p)
    for (int64_t c = 0; c < 3; ++c) img.pixels[p * 3 + c] = src[c * plane + p];
  return img;
}

std::string CifarSource::name(int64_t i) const { return detail::concat(name_, " record ", i); }

CifarSplits load_cifar(const std::string& dir, bool fine) {
  CifarSplits s;
  auto train = std::make_shared<CifarRecords>(), test = std::make_shared<CifarRecords>();
  std::string test_file;
  if (is_file(join(dir, "train.bin"))) {
    s.kind = "CIFAR-100";
    s.classes = fine ? 100 : 20;
    read_batch(join(dir, "train.bin"), 2, fine ? 1 : 0, s.classes, *train);
    test_file = join(dir, "test.bin");
    GPIPE_CHECK(is_file(test_file), test_file,
                ": missing (expected CIFAR-100's test.bin beside train.bin)");
    read_batch(test_file, 2, fine ? 1 : 0, s.classes, *test);
  } else {
    s.kind = "CIFAR-10";
    s.classes = 10;
    GPIPE_CHECK(is_file(join(dir, "data_batch_1.bin")), dir,
                ": no CIFAR files (expected data_batch_1.bin ... and test_batch.bin, or "
                "train.bin and test.bin)");
    for (int b = 1; is_file(join(dir, detail::concat("data_batch_", b, ".bin"))); ++b)
      read_batch(join(dir, detail::concat("data_batch_", b, ".bin")), 1, 0, 10, *train);
    test_file = join(dir, "test_batch.bin");
    GPIPE_CHECK(is_file(test_file), test_file,
                ": missing (expected CIFAR-10's test_batch.bin beside data_batch_1.bin)");
    read_batch(test_file, 1, 0, 10, *test);
  }
  s.train = std::make_shared<CifarSource>(train, join(dir, s.kind + " training"));
  s.test = std::make_shared<CifarSource>(test, test_file);
  return s;
}

}  // namespace gpipe
