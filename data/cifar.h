// CIFAR-10 and CIFAR-100 in their binary distribution (Krizhevsky 2009):
//
//   CIFAR-10:  data_batch_1.bin ... data_batch_5.bin, test_batch.bin; each
//              record 1 label byte, then 3072 pixel bytes.
//   CIFAR-100: train.bin, test.bin; each record a coarse (20 classes) and a
//              fine (100 classes) label byte, then 3072 pixel bytes.
//
// The pixels are 32x32 RGB, one plane per colour (R, then G, then B), rows
// top to bottom. The files are small (about 180 MB for the whole training
// split) and are read whole into memory.
//
//   if (is_cifar_folder(dir)) { CifarSplits s = load_cifar(dir, /*fine=*/true); ... }
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/image_folder.h"

namespace gpipe {

inline constexpr int64_t kCifarSide = 32;
inline constexpr int64_t kCifarPixels = 3 * kCifarSide * kCifarSide;

// True when `dir` holds data_batch_1.bin or train.bin.
bool is_cifar_folder(const std::string& dir);

// One split in memory: `records` examples of kCifarPixels bytes (planar RGB).
struct CifarRecords {
  std::vector<uint8_t> pixels;
  std::vector<int64_t> labels;
  std::vector<std::string> origin;  // file per record block, for messages
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

class CifarSource final : public ImageSource {
 public:
  CifarSource(std::shared_ptr<const CifarRecords> records, std::string name)
      : records_(std::move(records)), name_(std::move(name)) {}
  int64_t size() const override { return records_->size(); }
  int64_t label(int64_t i) const override { return records_->labels[i]; }
  Image image(int64_t i) const override;  // 32x32x3
  std::string name(int64_t i) const override;

 private:
  std::shared_ptr<const CifarRecords> records_;
  std::string name_;
};

struct CifarSplits {
  std::shared_ptr<CifarSource> train, test;
  int64_t classes = 0;  // 10; 100 (fine) or 20 (coarse)
  std::string kind;     // "CIFAR-10" or "CIFAR-100"
};

// Reads every batch file of `dir`. `fine` picks CIFAR-100's 100 classes
// (false: the 20 coarse ones; ignored for CIFAR-10). Throws gpipe::Error
// naming the file when one is missing, empty, or truncated (naming the
// record that is cut short and its byte offset), or holds a label out of
// range (naming the record).
CifarSplits load_cifar(const std::string& dir, bool fine = true);

}  // namespace gpipe
