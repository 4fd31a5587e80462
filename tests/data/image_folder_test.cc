#include "data/image_folder.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "core/error.h"
#include "data/cifar.h"
#include "data/image_set.h"
#include "tests/test_util.h"

using namespace gpipe;
using Catch::Matchers::Contains;

namespace {

Image flat(int64_t h, int64_t w, int64_t c, uint8_t v) {
  return Image{h, w, c, std::vector<uint8_t>(static_cast<size_t>(h * w * c), v)};
}

void mkdir_p(const std::string& d) { ::mkdir(d.c_str(), 0755); }

// root/<class>/<i>.png or .jpg: class 0 dark gray, class 1 bright RGB.
std::string make_folder(const std::string& name, int per_class) {
  const std::string root = testing::scratch_dir(name);
  for (const char* cls : {"b_bright", "a_dark"}) mkdir_p(root + "/" + cls);
  for (int i = 0; i < per_class; ++i) {
    write_png(root + "/a_dark/" + std::to_string(i) + ".png", flat(12, 10, 1, 40));
    write_jpeg(root + "/b_bright/" + std::to_string(i) + ".jpg", flat(8, 16, 3, 200));
  }
  testing::write_file(root + "/a_dark/notes.txt", "not an image");
  return root;
}

}  // namespace

TEST_CASE("an image folder lists classes and files in name order and splits by class",
          "[data][image]") {
  const std::string root = make_folder("listing", 5);
  const ImageFolderListing all = list_image_folder(root, "--data");
  REQUIRE(all.classes == std::vector<std::string>{"a_dark", "b_bright"});
  REQUIRE(all.files.size() == 10);
  CHECK(all.files[0].relative == "a_dark/0.png");
  CHECK(all.files[9].relative == "b_bright/4.jpg");
  CHECK(all.files[9].label == 1);
  const auto [train, val] = split_listing(all, 0.2);
  CHECK(train.files.size() == 8);
  REQUIRE(val.files.size() == 2);
  CHECK(val.files[0].label == 0);
  CHECK(val.files[1].label == 1);
  const auto again = split_listing(all, 0.2);  // a function of the names only
  CHECK(again.second.files[0].relative == val.files[0].relative);
}

TEST_CASE("image folder errors name the folder or file", "[data][image]") {
  const std::string empty = testing::scratch_dir("empty");
  CHECK_THROWS_WITH(list_image_folder(empty, "--data"),
                    Contains("--data") && Contains(empty) && Contains("no class folders"));
  CHECK_THROWS_WITH(list_image_folder(empty + "/missing", "--data"), Contains("does not exist"));
  mkdir_p(empty + "/cat");
  CHECK_THROWS_WITH(list_image_folder(empty, "--data"),
                    Contains(empty + "/cat") && Contains("holds no images"));
  const std::string root = make_folder("bad_file", 2);
  testing::write_file(root + "/a_dark/9.png", "\x89PNG\r\n\x1a\n garbage");
  ImageFolderSource source(list_image_folder(root, "--data"));
  CHECK_THROWS_WITH(source.image(2), Contains(root + "/a_dark/9.png"));
  const std::string other = make_folder("other_classes", 1);
  mkdir_p(other + "/c_extra");
  write_png(other + "/c_extra/0.png", flat(4, 4, 1, 0));
  CHECK_THROWS_WITH(list_image_folder(other, "--val-data", {"a_dark", "b_bright"}),
                    Contains("--val-data") && Contains("class folder names"));
}

TEST_CASE("ImageSet fits, normalises and augments images deterministically", "[data][image]") {
  const std::string root = make_folder("set", 3);
  auto source = std::make_shared<ImageFolderSource>(list_image_folder(root, "--data"));
  const ImageNormalization norm = measure_normalization(*source, 8, 0);
  REQUIRE(norm.channels == 3);  // one class is in colour
  CHECK(norm.mean[0] == Approx((40 + 200) / 2.0 / 255).epsilon(0.02));
  ImageSet set(source, {.image_size = 8, .norm = norm});
  const Tensor x = set.images({0, 5});
  REQUIRE(x.shape() == Shape{2, 3, 8, 8});
  const std::vector<float> v = x.to_vector<float>();
  CHECK(v[0] == Approx((40 / 255.0 - norm.mean[0]) / norm.std[0]).margin(1e-4));
  CHECK(set.labels({0, 5}).to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  const ImagePlacement p = augment_placement(7, 3, 1, 2);
  const ImagePlacement q = augment_placement(7, 3, 1, 2);
  CHECK((p.flip == q.flip && p.dy == q.dy && p.dx == q.dx));
  const Tensor shifted = set.images({0}, {ImagePlacement{false, 2, 0}});
  const std::vector<float> s = shifted.to_vector<float>();
  CHECK(s[0] == 0.0f);  // moved in from outside: the mean
  CHECK(s[2 * 8] == Approx(v[0]).margin(1e-4));
  CHECK_THROWS_WITH(ImageSet(source, {.image_size = 8, .norm = {3, {0.5}, {0.2}}}),
                    Contains("--mean") && Contains("expected 3"));
}

TEST_CASE("masks: class ids, 0/255 as binary, ids beyond the classes refused", "[data][image]") {
  const std::string root = make_folder("seg", 1);
  const std::string masks = testing::scratch_dir("seg_masks");
  mkdir_p(masks + "/a_dark");
  mkdir_p(masks + "/b_bright");
  Image m = flat(12, 10, 1, 0);
  m.pixels[0] = 255;
  write_png(masks + "/a_dark/0.png", m);
  write_png(masks + "/b_bright/0.png", flat(8, 16, 1, 3));
  auto source = std::make_shared<ImageFolderSource>(list_image_folder(root, "--data"), masks);
  CHECK(source->mask(0).pixels[0] == 1);
  CHECK(mask_classes(*source) == 4);
  ImageSet set(source, {.image_size = 8, .norm = {1, {0.5}, {0.25}}});
  const Tensor y = set.masks({1}, 4);
  CHECK(y.shape() == Shape{1, 8, 8});
  CHECK(y.to_vector<int64_t>()[10] == 3);
  CHECK_THROWS_WITH(set.masks({1}, 3), Contains("b_bright/0.jpg") && Contains("class id 3"));
  ::remove((masks + "/b_bright/0.png").c_str());
  CHECK_THROWS_WITH(source->mask(1), Contains(masks + "/b_bright/0.png"));
}

TEST_CASE("CIFAR batches: detected by name, planar RGB, truncation names the record",
          "[data][image]") {
  const std::string dir = testing::scratch_dir("cifar10");
  std::string rec(1 + kCifarPixels, '\0');
  rec[0] = 7;
  rec[1] = 10;         // R of pixel 0
  rec[1 + 1024] = 20;  // G
  rec[1 + 2048] = 30;  // B
  testing::write_file(dir + "/data_batch_1.bin", rec + rec);
  testing::write_file(dir + "/test_batch.bin", rec);
  REQUIRE(is_cifar_folder(dir));
  const CifarSplits s = load_cifar(dir);
  CHECK(s.classes == 10);
  REQUIRE(s.train->size() == 2);
  CHECK(s.train->label(1) == 7);
  const Image img = s.train->image(0);
  CHECK(img.pixels[0] == 10);
  CHECK(img.pixels[1] == 20);
  CHECK(img.pixels[2] == 30);
  testing::write_file(dir + "/data_batch_1.bin", rec + rec.substr(0, 100));
  CHECK_THROWS_WITH(load_cifar(dir), Contains("data_batch_1.bin") && Contains("record 1") &&
                                         Contains("offset 3073"));
  const std::string c100 = testing::scratch_dir("cifar100");
  std::string rec100 = std::string(1, '\x13') + std::string(1, '\x63') + rec.substr(1);
  testing::write_file(c100 + "/train.bin", rec100);
  testing::write_file(c100 + "/test.bin", rec100);
  CHECK(load_cifar(c100, true).train->label(0) == 99);
  CHECK(load_cifar(c100, false).train->label(0) == 19);
  CHECK(load_cifar(c100, false).classes == 20);
}
