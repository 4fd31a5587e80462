#include "optim/loss_scaler.h"

#include <catch2/catch.hpp>

#include "core/error.h"

using namespace gpipe;
using Catch::Contains;

TEST_CASE("loss scaler: grows after a run of finite steps, backs off and skips on overflow") {
  optim::LossScaler s({.initial_scale = 1024, .growth = 2, .backoff = 0.5, .growth_interval = 3});
  CHECK(s.scale() == 1024);
  CHECK(s.update(true));
  CHECK(s.update(true));
  CHECK(s.scale() == 1024);
  CHECK(s.update(true));  // the third finite step in a row
  CHECK(s.scale() == 2048);
  CHECK(s.good_steps() == 0);
  CHECK(s.update(true));
  CHECK_FALSE(s.update(false));  // overflow: skip, back off, count again from zero
  CHECK(s.scale() == 1024);
  CHECK(s.good_steps() == 0);
  CHECK(s.update(true));
  CHECK(s.update(true));
  CHECK(s.scale() == 1024);
  CHECK(s.update(true));
  CHECK(s.scale() == 2048);
}

TEST_CASE("loss scaler: bounded by min and max scale") {
  optim::LossScaler s({.initial_scale = 4, .growth_interval = 1, .min_scale = 1, .max_scale = 16});
  for (int i = 0; i < 10; ++i) s.update(true);
  CHECK(s.scale() == 16);
  for (int i = 0; i < 10; ++i) CHECK_FALSE(s.update(false));
  CHECK(s.scale() == 1);
}

TEST_CASE("loss scaler: a checkpoint's state resumes exactly") {
  optim::LossScaler a({.initial_scale = 3.0 / 7, .growth_interval = 5});
  a.update(true);
  a.update(true);
  a.update(false);
  a.update(true);
  std::map<std::string, std::string> meta;
  a.save(meta, "train.loss_scale.");
  optim::LossScaler b({.initial_scale = 99, .growth_interval = 5});
  b.load(meta, "train.loss_scale.");
  CHECK(b.scale() == a.scale());  // %.17g round-trips a double
  CHECK(b.good_steps() == a.good_steps());
  for (int i = 0; i < 12; ++i) {
    const bool finite = i % 7 != 3;
    CHECK(a.update(finite) == b.update(finite));
    CHECK(a.scale() == b.scale());
  }
  std::map<std::string, std::string> bad = meta;
  bad["train.loss_scale.scale"] = "-2";
  CHECK_THROWS_WITH(b.load(bad, "train.loss_scale."),
                    Contains("'train.loss_scale.scale' is '-2', expected a positive number"));
  bad = meta;
  bad.erase("train.loss_scale.good_steps");
  CHECK_THROWS_WITH(b.load(bad, "train.loss_scale."), Contains("no 'train.loss_scale.good_steps'"));
  CHECK_THROWS_WITH(optim::LossScaler({.initial_scale = 0}), Contains("initial scale"));
  CHECK_THROWS_WITH(optim::LossScaler({.backoff = 1.5}), Contains("0 < backoff < 1"));
}
