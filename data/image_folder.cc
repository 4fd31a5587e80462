// A folder of class folders: listing in name order (so labels never depend on
// the file system's order), a split fixed by file names alone, and masks
// found by relative path. Decoding is left to the caller's thread.
#include "data/image_folder.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "data/batch.h"

namespace gpipe {
namespace {

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The entries of `dir` (no "." or hidden names), sorted by name.
std::vector<std::string> entries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  GPIPE_CHECK(d != nullptr, dir, ": cannot list the folder (expected a readable directory)");
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace

Image ImageSource::mask(int64_t i) const {
  throw Error(detail::concat(name(i), ": this data set has no masks (expected --masks=DIR)"));
}

bool has_image_extension(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ext == "png" || ext == "jpg" || ext == "jpeg";
}

ImageFolderListing list_image_folder(const std::string& dir, const std::string& flag,
                                     const std::vector<std::string>& classes) {
  GPIPE_CHECK(is_directory(dir), flag, ": folder '", dir,
              "' does not exist (expected a folder with one subfolder of images per class)");
  ImageFolderListing out;
  out.root = dir;
  for (const std::string& name : entries(dir))
    if (is_directory(join(dir, name))) out.classes.push_back(name);
  GPIPE_CHECK(!out.classes.empty(), flag, ": folder '", dir,
              "' has no class folders (expected one subfolder of images per class)");
  if (!classes.empty())
    GPIPE_CHECK(out.classes == classes, flag, ": folder '", dir, "' has ", out.classes.size(),
                " class folders, not the training data's ", classes.size(),
                " (expected the same class folder names)");
  for (size_t c = 0; c < out.classes.size(); ++c) {
    const std::string class_dir = join(dir, out.classes[c]);
    size_t before = out.files.size();
    for (const std::string& name : entries(class_dir))
      if (has_image_extension(name) && !is_directory(join(class_dir, name)))
        out.files.push_back({out.classes[c] + "/" + name, static_cast<int64_t>(c)});
    GPIPE_CHECK(out.files.size() > before, flag, ": class folder '", class_dir,
                "' holds no images (expected .png, .jpg or .jpeg files)");
  }
  return out;
}

std::pair<ImageFolderListing, ImageFolderListing> split_listing(const ImageFolderListing& all,
                                                                double val_fraction) {
  GPIPE_CHECK(val_fraction >= 0 && val_fraction < 1,
              "--val-fraction: expected a share in [0, 1), got ", val_fraction);
  ImageFolderListing train{all.root, all.classes, {}}, val{all.root, all.classes, {}};
  size_t first = 0;
  while (first < all.files.size()) {
    size_t end = first;
    while (end < all.files.size() && all.files[end].label == all.files[first].label) ++end;
    const int64_t n = static_cast<int64_t>(end - first);
    int64_t held = std::llround(val_fraction * static_cast<double>(n));
    if (val_fraction > 0 && n >= 2) held = std::clamp<int64_t>(held, 1, n - 1);
    const std::vector<int64_t> order =
        permutation(n, mix_key(0x5e1ec7, static_cast<uint64_t>(all.files[first].label)));
    std::vector<bool> is_val(n, false);
    for (int64_t k = 0; k < held; ++k) is_val[order[k]] = true;
    for (int64_t k = 0; k < n; ++k) (is_val[k] ? val : train).files.push_back(all.files[first + k]);
    first = end;
  }
  return {std::move(train), std::move(val)};
}

ImageFolderSource::ImageFolderSource(ImageFolderListing listing, std::string masks_dir)
    : listing_(std::move(listing)), masks_dir_(std::move(masks_dir)) {
  if (!masks_dir_.empty())
    GPIPE_CHECK(
        is_directory(masks_dir_), "--masks: folder '", masks_dir_,
        "' does not exist (expected a folder parallel to --data holding <class>/<name>.png)");
}

std::string ImageFolderSource::name(int64_t i) const {
  return join(listing_.root, listing_.files[i].relative);
}

Image ImageFolderSource::image(int64_t i) const { return read_image(name(i)); }

std::string ImageFolderSource::mask_path(int64_t i) const {
  const std::string& rel = listing_.files[i].relative;
  return join(masks_dir_, rel.substr(0, rel.rfind('.')) + ".png");
}

Image ImageFolderSource::mask(int64_t i) const {
  if (!has_masks()) return ImageSource::mask(i);
  Image m = read_mask(mask_path(i));
  bool binary = true;
  for (uint8_t v : m.pixels) binary = binary && (v == 0 || v == 255);
  if (binary)
    for (uint8_t& v : m.pixels) v = v == 255 ? 1 : 0;
  return m;
}

int64_t mask_classes(const ImageSource& source) {
  int64_t top = 0;
  for (int64_t i = 0; i < source.size(); ++i) {
    const Image m = source.mask(i);
    for (uint8_t v : m.pixels) top = std::max<int64_t>(top, v);
  }
  return std::max<int64_t>(top + 1, 2);
}

}  // namespace gpipe
