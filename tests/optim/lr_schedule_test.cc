// Learning-rate schedules at a few steps, and spec parse errors.
#include "optim/lr_schedule.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "core/error.h"

namespace gpipe::optim {
namespace {

using Catch::Matchers::Contains;

TEST_CASE("constant") {
  auto s = parse_lr_schedule("constant", 0.5);
  CHECK(s->lr_at(1) == 0.5);
  CHECK(s->lr_at(1000000) == 0.5);
  CHECK(s->str() == "constant");
}

TEST_CASE("inverse_sqrt: linear warm-up to the base, then 1/sqrt(step)") {
  auto s = parse_lr_schedule("inverse_sqrt:warmup=4000", 1e-3);
  CHECK(s->lr_at(1) == Approx(1e-3 / 4000));
  CHECK(s->lr_at(2000) == Approx(0.5e-3));
  CHECK(s->lr_at(4000) == Approx(1e-3));     // peak
  CHECK(s->lr_at(16000) == Approx(0.5e-3));  // sqrt(4000 / 16000) = 1/2
  CHECK(s->str() == "inverse_sqrt:warmup=4000");
}

TEST_CASE("noam: d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)") {
  auto s = parse_lr_schedule("noam:d_model=512,warmup=4000", 1.0);
  const double peak = 1.0 / std::sqrt(512.0) / std::sqrt(4000.0);
  CHECK(s->lr_at(4000) == Approx(peak));
  CHECK(s->lr_at(1) == Approx(1.0 / std::sqrt(512.0) * std::pow(4000.0, -1.5)));
  CHECK(s->lr_at(16000) == Approx(peak / 2));
  CHECK(parse_lr_schedule(s->str(), 1.0)->lr_at(123) == s->lr_at(123));
}

TEST_CASE("cosine: warm-up, half-cosine to the floor, floor after total") {
  auto s = parse_lr_schedule("cosine:warmup=100,total=10000,floor=0.0", 1.0);
  CHECK(s->lr_at(50) == Approx(0.5));
  CHECK(s->lr_at(100) == Approx(1.0));
  CHECK(s->lr_at(5050) == Approx(0.5));  // half way through the decay
  CHECK(s->lr_at(10000) == Approx(0.0).margin(1e-15));
  CHECK(s->lr_at(20000) == 0.0);
  auto f = parse_lr_schedule("cosine: total=10, floor=0.1", 1.0);  // warmup defaults to 0
  CHECK(f->lr_at(1) == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.1))));
  CHECK(f->lr_at(5) == Approx(0.55));
  CHECK(f->lr_at(10) == Approx(0.1));
  CHECK(f->lr_at(12) == 0.1);
  CHECK(parse_lr_schedule(f->str(), 1.0)->lr_at(7) == f->lr_at(7));
}

TEST_CASE("step: gamma every k steps") {
  auto s = parse_lr_schedule("step:every=1000,gamma=0.5", 0.1);
  CHECK(s->lr_at(1) == Approx(0.1));
  CHECK(s->lr_at(1000) == Approx(0.1));
  CHECK(s->lr_at(1001) == Approx(0.05));
  CHECK(s->lr_at(3500) == Approx(0.0125));
  CHECK(parse_lr_schedule("step:every=10", 1.0)->lr_at(11) ==
        Approx(0.1));  // gamma defaults to 0.1
}

TEST_CASE("Schedule parse errors say what is wrong and what is allowed") {
  CHECK_THROWS_WITH(
      parse_lr_schedule("linear", 1.0),
      Contains("unknown schedule 'linear' (known: constant, cosine, inverse_sqrt, noam, step)"));
  CHECK_THROWS_WITH(parse_lr_schedule("inverse_sqrt", 1.0),
                    Contains("inverse_sqrt needs warmup=..."));
  CHECK_THROWS_WITH(parse_lr_schedule("inverse_sqrt:warmpu=10", 1.0),
                    Contains("unknown key 'warmpu' for inverse_sqrt (allowed: warmup)"));
  CHECK_THROWS_WITH(parse_lr_schedule("constant:warmup=10", 1.0),
                    Contains("unknown key 'warmup' for constant (allowed: none)"));
  CHECK_THROWS_WITH(parse_lr_schedule("inverse_sqrt:warmup=ten", 1.0),
                    Contains("warmup must be an integer, got 'ten'"));
  CHECK_THROWS_WITH(parse_lr_schedule("inverse_sqrt:warmup=4000.5", 1.0),
                    Contains("warmup must be an integer, got '4000.5'"));
  CHECK_THROWS_WITH(parse_lr_schedule("step:every=10,gamma=x", 1.0),
                    Contains("gamma must be a number, got 'x'"));
  CHECK_THROWS_WITH(parse_lr_schedule("step:every=10,every=20", 1.0),
                    Contains("key 'every' given twice"));
  CHECK_THROWS_WITH(parse_lr_schedule("step:every", 1.0),
                    Contains("expected key=value, got 'every'"));
  CHECK_THROWS_WITH(parse_lr_schedule("cosine:warmup=100,total=100", 1.0),
                    Contains("lr schedule 'cosine:warmup=100,total=100': cosine schedule: total "
                             "(100) must exceed warmup (100)"));
  CHECK_THROWS_WITH(parse_lr_schedule("cosine:total=100,floor=2", 1.0),
                    Contains("floor must be in [0, base lr 1], got 2"));
  CHECK_THROWS_WITH(parse_lr_schedule("inverse_sqrt:warmup=0", 1.0),
                    Contains("warmup must be >= 1, got 0"));
  CHECK_THROWS_WITH(parse_lr_schedule("constant", -1.0), Contains("base lr must be >= 0, got -1"));
  CHECK_THROWS_WITH(parse_lr_schedule("constant", 1.0)->lr_at(0),
                    Contains("steps are 1-based, got lr_at(0)"));
  CHECK_THROWS_AS(parse_lr_schedule("", 1.0), Error);
}

}  // namespace
}  // namespace gpipe::optim
