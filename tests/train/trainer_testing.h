// Helpers of gpipe_train's whole-run tests (trainer_test.cc,
// trainer_models_test.cc): a scratch path, tiny model flags, and the check
// that a resumed run takes bitwise the steps of one that never stopped.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tools/train/config.h"
#include "tools/train/trainer.h"

namespace gpipe::train::testing {

using Catch::Contains;

inline std::string temp_path(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("gpipe_train_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

inline std::vector<std::string> tiny_transformer(double dropout) {
  return {"--model=transformer",
          "--layers=1",
          "--ffn=64",
          "--heads=2",
          "--dim=32",
          "--languages=fr,de",
          "--max-len=16",
          "--train-limit=512",
          "--batch=16",
          "--K=2",
          "--M=2",
          "--threads=1",
          "--dropout=" + std::to_string(dropout),
          "--eval-batches=2",
          "--eval-sentences=4",
          "--log-every=1"};
}

inline std::vector<std::string> tiny_amoebanet() {
  return {"--model=amoebanet",
          "--normal-cells=0",
          "--filters=8",
          "--train-limit=256",
          "--batch=16",
          "--K=2",
          "--M=2",
          "--threads=1",
          "--eval-batches=2",
          "--log-every=1"};
}

inline std::vector<std::string> with(std::vector<std::string> args,
                                     std::initializer_list<std::string> more) {
  args.insert(args.end(), more);
  return args;
}

// Runs `steps` steps saving every `save_at`, then a second run resumed from
// the checkpoint of step `save_at`; its steps must have bitwise the losses of
// the first run's steps after `save_at`. Returns that checkpoint's path.
inline std::string check_resume_is_exact(const std::vector<std::string>& base,
                                         const std::string& tag, int64_t steps = 4,
                                         int64_t save_at = 2) {
  const std::string pattern = temp_path(tag + "-{step}.safetensors");
  const std::string n = "--steps=" + std::to_string(steps);
  std::ostringstream log1, log2;
  TrainConfig first = parse_train_flags(
      with(base, {n, "--save=" + pattern, "--save-every=" + std::to_string(save_at)}));
  first.final_eval = false;
  const TrainSummary a = train::train(first, log1);
  REQUIRE(static_cast<int64_t>(a.losses.size()) == steps);
  const std::string resumed_from = checkpoint_path(pattern, save_at);
  TrainConfig second = parse_train_flags(with(base, {n, "--resume=" + resumed_from}));
  second.final_eval = false;
  const TrainSummary b = train::train(second, log2);
  INFO(log1.str() << "\n---- resumed ----\n" << log2.str());
  CHECK(b.first_step == save_at);
  CHECK(b.last_step == steps);
  REQUIRE(static_cast<int64_t>(b.losses.size()) == steps - save_at);
  for (int64_t s = save_at; s < steps; ++s) {
    INFO("step " << s + 1);
    CHECK(b.losses[s - save_at] == a.losses[s]);  // bitwise
  }
  CHECK_THAT(log2.str(), Contains("resumed from") && !Contains("warning"));
  return resumed_from;
}

}  // namespace gpipe::train::testing
