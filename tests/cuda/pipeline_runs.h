// What the GPU pipeline tests (pipeline_test.cc, lm_test.cc) record of a
// few Adam steps, and the comparison of two such runs: losses, every
// gradient and buffer relative to the largest, the evaluation loss if any;
// and the schedule cases they run.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "optim/adam.h"
#include "pipeline/pipeline.h"

namespace gpipe::cuda_testing {

using Grads = std::map<std::string, std::vector<float>>;

struct Run {
  std::vector<double> losses;
  Grads grads;    // after the last step's backward
  Grads buffers;  // after the last step (BatchNorm's running statistics)
  std::optional<double> eval;
};

// A pipeline to compare with one cell: K cells on cuda:0, the schedule, the
// remat mode and the virtual stages per device.
struct ScheduleCase {
  int k;
  ScheduleKind kind;
  RematMode remat;
  int v;
};

inline Grads grads_of(Pipeline& pipe) {
  Grads g;
  for (const NamedTensor& t : pipe.named_state())
    if (t.tensor->requires_grad() && t.tensor->grad().defined())
      g[t.name] = t.tensor->grad().to_vector<float>();
  return g;
}

// `steps` Adam steps (lr 1e-2) of `pipe` on `batch`: each step's loss and
// the last step's gradients.
inline Run adam_steps(Pipeline& pipe, const Batch& batch, int steps) {
  optim::Adam opt(pipe.parameters(), {.lr = 1e-2});
  Run r;
  for (int s = 0; s < steps; ++s) {
    r.losses.push_back(pipe.train_step(batch).loss);
    if (s + 1 == steps) r.grads = grads_of(pipe);
    opt.step();
    pipe.zero_grad();
  }
  return r;
}

// max |a - b| over max(1e-2, max |b|): relative to the largest gradient.
inline double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double scale = 1e-2, diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
  }
  return diff / scale;
}

inline void check_same(const Run& got, const Run& want, double tol) {
  REQUIRE(got.losses.size() == want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    INFO("step " << s + 1);
    CHECK(got.losses[s] == Approx(want.losses[s]).epsilon(tol / 2));
  }
  if (want.eval) {
    REQUIRE(got.eval);
    CHECK(*got.eval == Approx(*want.eval).epsilon(tol / 2));
  }
  REQUIRE(!want.grads.empty());
  CHECK(got.grads.size() == want.grads.size());
  double worst = 0;
  for (const auto& [name, g] : want.grads) {
    INFO("gradient of " << name);
    REQUIRE(got.grads.count(name));
    const double d = max_rel_diff(got.grads.at(name), g);
    worst = std::max(worst, d);
    CHECK(d < tol);
  }
  for (const auto& [name, b] : want.buffers) {
    INFO("buffer " << name);
    REQUIRE(got.buffers.count(name));
    CHECK(max_rel_diff(got.buffers.at(name), b) < tol);
  }
  UNSCOPED_INFO("worst gradient difference " << worst);
}

}  // namespace gpipe::cuda_testing
