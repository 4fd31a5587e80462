// Whole training runs of the image models (AmoebaNet, U-Net, ResNet) on
// Fashion-MNIST through train(), and the --plot and final-evaluation output.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "optim/checkpoint.h"
#include "tests/train/trainer_testing.h"
#include "tools/train/config.h"
#include "tools/train/metrics_log.h"
#include "tools/train/task.h"
#include "tools/train/trainer.h"

using namespace gpipe;
using namespace gpipe::train;
using Catch::Contains;

namespace {

using testing::check_resume_is_exact;
using testing::temp_path;
using testing::tiny_amoebanet;
using testing::tiny_transformer;
using testing::with;

}  // namespace

TEST_CASE("gpipe_train: a tiny AmoebaNet on Fashion-MNIST reports test accuracy") {
  std::ostringstream log;
  const TrainSummary s =
      train::train(parse_train_flags(with(tiny_amoebanet(), {"--steps=2", "--lr=0.02"})), log);
  INFO(log.str());
  REQUIRE(s.final_eval.has_value());
  REQUIRE(s.final_eval->accuracy.has_value());
  CHECK(s.final_eval->examples == 32);
  CHECK(*s.final_eval->accuracy >= 0.0);
  CHECK_THAT(log.str(), Contains("accuracy") && Contains("ex/s") && !Contains("tok/s"));
}

TEST_CASE("gpipe_train: U-Net segments Fashion-MNIST foregrounds through a pipeline of skips") {
  // 4 cells: the level-0 skip crosses 3 boundaries, level 1 two, level 2 one.
  std::ostringstream log;
  const TrainSummary s = train::train(
      parse_train_flags({"--model=unet", "--unet-depth=3", "--unet-channels=8", "--unet-convs=1",
                         "--K=4", "--M=4", "--balance=2,2,2,2", "--batch=32", "--steps=30",
                         "--train-limit=960", "--eval-batches=4", "--threads=1", "--log-every=10"}),
      log);
  INFO(log.str());
  REQUIRE(s.final_eval.has_value());
  REQUIRE(s.final_eval->iou.has_value());
  CHECK(s.final_eval->examples == 128);
  // A constant prediction scores the larger class's share of pixels and an
  // IoU of 0 or the foreground share (at most 28^2 / 32^2 of a canvas, far
  // less in practice); these need the model to find the object's outline.
  CHECK(*s.final_eval->accuracy > 0.8);
  CHECK(*s.final_eval->iou > 0.6);
  CHECK_THAT(log.str(), Contains("pixel accuracy") && Contains("foreground IoU"));
}

TEST_CASE(
    "gpipe_train: AmoebaNet with the small-input stem, label smoothing and augmentation learns "
    "Fashion-MNIST through a pipeline") {
  std::ostringstream log;
  const TrainSummary s = train::train(
      parse_train_flags({"--model=amoebanet", "--stem=small", "--filters=8", "--normal-cells=1",
                         "--K=2", "--M=4", "--batch=32", "--steps=40", "--train-limit=1280",
                         "--eval-batches=8", "--threads=1", "--log-every=20", "--lr=0.1",
                         "--label-smoothing=0.1", "--augment", "--image-size=28"}),
      log);
  INFO(log.str());
  REQUIRE(s.final_eval.has_value());
  CHECK_THAT(log.str(), Contains("; AmoebaNet-D(N=1, F=8) with the small-input stem;") &&
                            Contains("28x28, random flips and shifts") &&
                            Contains("label smoothing 0.1"));
  CHECK(*s.final_eval->accuracy > 0.5);  // chance: 0.1
}

TEST_CASE("gpipe_train: a ResNet cut inside its blocks learns Fashion-MNIST above chance") {
  std::ostringstream log;
  const TrainSummary s = train::train(
      parse_train_flags({"--model=resnet", "--split-blocks", "--resnet-width=4", "--K=3", "--M=4",
                         "--batch=32", "--steps=40", "--train-limit=1280", "--eval-batches=8",
                         "--threads=1", "--log-every=20", "--lr=0.1"}),
      log);
  INFO(log.str());
  REQUIRE(s.final_eval.has_value());
  CHECK(*s.final_eval->accuracy > 0.3);  // chance: 0.1
}

namespace {
// "" if `doc` is well-formed as far as tags go (every element closed in
// order, attributes quoted), else what is wrong.
std::string tag_problem(const std::string& doc) {
  std::vector<std::string> open;
  for (size_t i = doc.find('<'); i != std::string::npos; i = doc.find('<', i + 1)) {
    const size_t end = doc.find('>', i);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(i);
    std::string tag = doc.substr(i + 1, end - i - 1);
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) return "unbalanced quotes in <" + tag;
    if (tag.empty()) return "empty tag";
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) return "</" + name + "> closes nothing open";
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find(' ')));
    }
  }
  return open.empty() ? "" : "<" + open.back() + "> never closed";
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t i = s.find(what); i != std::string::npos; i = s.find(what, i + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("gpipe_train --no-final-eval keeps the --eval-every evaluation at the last step") {
  std::ostringstream log;
  const TrainSummary s = train::train(
      parse_train_flags(with(tiny_amoebanet(), {"--steps=4", "--eval-every=2", "--no-final-eval"})),
      log);
  INFO(log.str());
  CHECK_FALSE(s.final_eval.has_value());
  CHECK_THAT(log.str(), Contains("eval at step 2:") && Contains("eval at step 4:"));
}

TEST_CASE("gpipe_train --plot draws the run's series as well-formed SVG") {
  const std::string path = temp_path("run.svg");
  std::ostringstream log;
  train::train(parse_train_flags(with(tiny_amoebanet(), {"--steps=6", "--eval-every=3",
                                                         "--plot=" + path, "--lr=0.02"})),
               log);
  std::ifstream in(path);
  std::stringstream doc;
  doc << in.rdbuf();
  const std::string svg = doc.str();
  INFO(svg);
  CHECK(tag_problem(svg) == "");
  CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  for (const char* series : {"training loss", "learning rate", "examples per second (each step)",
                             "held-out loss", "test accuracy (%)"})
    CHECK(count_of(svg, std::string("data-series=\"") + series + "\"") == 1);
  // Each training series is one line through the 6 steps; the evaluations
  // (steps 3 and 6, the final one) are marked points.
  const size_t loss_at = svg.find("data-series=\"training loss\"");
  const size_t poly = svg.find("points=\"", loss_at) + 8;
  const std::string points = svg.substr(poly, svg.find('"', poly) - poly);
  CHECK(count_of(points, ",") == 6);
  CHECK(count_of(svg, "<circle") == 2 * 2);  // held-out loss and accuracy at steps 3 and 6
  CHECK_THAT(log.str(), Contains("wrote the run's plot to " + path));
  // A path that cannot be written is an error naming the flag, before training.
  CHECK_THROWS_WITH(
      train::train(parse_train_flags(
                       with(tiny_amoebanet(), {"--steps=1", "--plot=/nonexistent/dir/run.svg"})),
                   log),
      Contains("--plot: cannot write '/nonexistent/dir/run.svg'"));
}
