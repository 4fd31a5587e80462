// Image data sets as stored: a folder of class folders (optionally with a
// parallel folder of segmentation masks) and CIFAR's binary batches
// (data/cifar.h), both behind ImageSource. Nothing here decodes ahead:
// ImageSource::image(i) reads and decodes example i when asked, so a
// loader thread can do it while the model trains (data/image_set.h
// preprocesses and batches).
//
//   ImageFolderListing all = list_image_folder("photos");      // photos/<class>/<file>
//   auto [train, val] = split_listing(all, /*val_fraction=*/0.1);
//   ImageFolderSource source(train, /*masks_dir=*/"");
//   Image img = source.image(0);  // photos/<first class>/<first file>
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/image_decode.h"

namespace gpipe {

// Examples with class labels, decoded on demand. Thread-safe.
class ImageSource {
 public:
  virtual ~ImageSource() = default;
  virtual int64_t size() const = 0;
  virtual int64_t label(int64_t i) const = 0;  // in [0, classes)
  virtual Image image(int64_t i) const = 0;
  // Segmentation: one channel of class ids, the image's height and width.
  virtual bool has_masks() const { return false; }
  virtual Image mask(int64_t i) const;  // throws gpipe::Error unless has_masks()
  // Where example i comes from, for error messages ("photos/cat/1.jpg").
  virtual std::string name(int64_t i) const = 0;
};

struct ImageFile {
  std::string relative;  // "<class>/<file>", below the folder's root
  int64_t label = 0;
};

struct ImageFolderListing {
  std::string root;
  std::vector<std::string> classes;  // the class folders' names, in name order
  std::vector<ImageFile> files;      // by class, then by file name
};

// File names ending in these (any case) are images; others are skipped.
bool has_image_extension(const std::string& name);

// Lists `dir`: every subfolder is a class (in name order; hidden ones
// skipped), every image file in it an example (in name order). With
// `classes` given (a validation folder), the subfolders must be exactly
// those. Throws gpipe::Error naming `flag` and the folder when `dir` is
// missing, has no class folders, a class folder without images, or the
// classes differ.
ImageFolderListing list_image_folder(const std::string& dir, const std::string& flag,
                                     const std::vector<std::string>& classes = {});

// Deterministic split: from each class, round(val_fraction * count) files
// (at least one when val_fraction > 0 and the class has two or more) go to
// the second listing, chosen by a fixed shuffle of the class's files that
// depends on nothing else (not on --seed), so every run splits alike.
std::pair<ImageFolderListing, ImageFolderListing> split_listing(const ImageFolderListing& all,
                                                                double val_fraction);

// A listing read file by file. With `masks_dir`, example "<class>/<name>.<ext>"
// has the mask "<masks_dir>/<class>/<name>.png": pixel values are class ids,
// except that a mask holding only 0 and 255 is binary and reads as 0 / 1.
class ImageFolderSource final : public ImageSource {
 public:
  ImageFolderSource(ImageFolderListing listing, std::string masks_dir = "");
  int64_t size() const override { return static_cast<int64_t>(listing_.files.size()); }
  int64_t label(int64_t i) const override { return listing_.files[i].label; }
  Image image(int64_t i) const override;
  bool has_masks() const override { return !masks_dir_.empty(); }
  Image mask(int64_t i) const override;
  std::string name(int64_t i) const override;
  std::string mask_path(int64_t i) const;
  const ImageFolderListing& listing() const { return listing_; }

 private:
  ImageFolderListing listing_;
  std::string masks_dir_;
};

// The class count the masks of `source` need: the largest id of any mask,
// plus one, and at least 2 (each mask is decoded once). Throws gpipe::Error
// naming a mask that is missing, unreadable or not one channel.
int64_t mask_classes(const ImageSource& source);

}  // namespace gpipe
