// gpipe_train on the user's images: a generated class folder (ResNet), CIFAR
// binary batches written here (AmoebaNet), and U-Net on masks.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <sstream>

#include "core/error.h"
#include "data/cifar.h"
#include "data/image_decode.h"
#include "tests/test_util.h"
#include "tests/train/trainer_testing.h"
#include "tools/train/task.h"

using namespace gpipe;
using namespace gpipe::train;
using Catch::Matchers::Contains;
using gpipe::train::testing::tiny_amoebanet;
using gpipe::train::testing::with;

namespace {

void mkdir_p(const std::string& d) { ::mkdir(d.c_str(), 0755); }

// root/<class>/<i>.<ext>: class 0 dark squares, class 1 bright ones, with a
// lighter centre (the masks' class 1 / 255).
std::string make_folder(const std::string& name, int per_class, bool colour,
                        const std::string& masks = "") {
  const std::string root = gpipe::testing::scratch_dir(name);
  for (int c = 0; c < 2; ++c) {
    const std::string cls = c == 0 ? "/dark" : "/light";
    mkdir_p(root + cls);
    if (!masks.empty()) mkdir_p(masks + cls);
    for (int i = 0; i < per_class; ++i) {
      const int64_t ch = colour ? 3 : 1;
      Image img{20, 24, ch, std::vector<uint8_t>(20 * 24 * ch, c == 0 ? 30 : 180)};
      Image mask{20, 24, 1, std::vector<uint8_t>(20 * 24, 0)};
      for (int64_t y = 6; y < 14; ++y)
        for (int64_t x = 6 + i % 4; x < 16; ++x) {
          for (int64_t k = 0; k < ch; ++k) img.pixels[(y * 24 + x) * ch + k] = 250;
          mask.pixels[y * 24 + x] = 255;
        }
      const std::string stem = cls + "/" + std::to_string(i);
      if (i % 2)
        write_jpeg(root + stem + ".jpg", img);
      else
        write_png(root + stem + ".png", img);
      if (!masks.empty()) write_png(masks + stem + ".png", mask);
    }
  }
  return root;
}

}  // namespace

TEST_CASE("gpipe_train: ResNet trains 2 steps on a folder of PNG and JPEG classes") {
  const std::string root = make_folder("train_folder", 8, /*colour=*/true);
  std::ostringstream log;
  const TrainSummary s =
      train::train(parse_train_flags({"--model=resnet", "--resnet-width=4", "--data=" + root,
                                      "--batch=8", "--steps=2", "--val-fraction=0.25", "--augment",
                                      "--threads=1", "--log-every=1"}),
                   log);
  INFO(log.str());
  REQUIRE(s.final_eval.has_value());
  CHECK(s.final_eval->examples == 4);  // 2 of each class's 8 held out
  // The reported count is the model that trained: 3 input channels, 2 classes.
  TrainConfig rgb = parse_train_flags({"--model=resnet", "--resnet-width=4"});
  rgb.data_channels = 3;
  rgb.data_classes = 2;
  CHECK(s.parameters == parameter_count(rgb));
  CHECK(s.parameters != parameter_count(parse_train_flags({"--model=resnet", "--resnet-width=4"})));
  CHECK_THAT(log.str(), Contains("image folder") && Contains("2 classes") && Contains("3x32x32") &&
                            Contains("measured on 12 images"));
}

TEST_CASE("gpipe_train: AmoebaNet trains on CIFAR-10 batches; bad data is one error") {
  const std::string dir = gpipe::testing::scratch_dir("train_cifar");
  std::string records;
  for (int r = 0; r < 20; ++r) {
    std::string rec(1 + kCifarPixels, static_cast<char>(r % 2 ? 200 : 20));
    rec[0] = static_cast<char>(r % 2);
    records += rec;
  }
  gpipe::testing::write_file(dir + "/data_batch_1.bin", records);
  gpipe::testing::write_file(dir + "/test_batch.bin", records.substr(0, 8 * (1 + kCifarPixels)));
  std::ostringstream log;
  const TrainSummary s = train::train(
      parse_train_flags(with(tiny_amoebanet(), {"--data=" + dir, "--steps=2", "--mean=0.4,0.4,0.4",
                                                "--std=0.3,0.3,0.3"})),
      log);
  INFO(log.str());
  REQUIRE(s.final_eval.has_value());
  CHECK(s.final_eval->examples == 8);
  CHECK_THAT(log.str(), Contains("CIFAR-10"));
  gpipe::testing::write_file(dir + "/test_batch.bin", records.substr(0, 5000));
  CHECK_THROWS_WITH(
      train::train(parse_train_flags(with(tiny_amoebanet(), {"--data=" + dir, "--steps=1"})), log),
      Contains("test_batch.bin") && Contains("record 1"));
  CHECK_THROWS_WITH(
      train::train(parse_train_flags(with(tiny_amoebanet(), {"--data=" + dir + "/none"})), log),
      Contains("--data") && Contains("does not exist"));
}

TEST_CASE("gpipe_train: U-Net trains on --masks, classes from the masks") {
  const std::string masks = gpipe::testing::scratch_dir("train_masks");
  const std::string root = make_folder("train_seg", 4, /*colour=*/false, masks);
  std::ostringstream log;
  const TrainSummary s = train::train(
      parse_train_flags({"--model=unet", "--unet-depth=2", "--unet-channels=4", "--unet-convs=1",
                         "--data=" + root, "--masks=" + masks, "--batch=4", "--steps=2",
                         "--val-fraction=0.25", "--threads=1", "--log-every=1"}),
      log);
  INFO(log.str());
  REQUIRE(s.final_eval.has_value());
  REQUIRE(s.final_eval->iou.has_value());
  CHECK(s.final_eval->examples == 2);
  CHECK_THAT(log.str(), Contains("1x32x32"));
  CHECK_THROWS_WITH(
      train::train(parse_train_flags({"--model=unet", "--data=" + root, "--batch=4", "--steps=1"}),
                   log),
      Contains("--masks"));
}
