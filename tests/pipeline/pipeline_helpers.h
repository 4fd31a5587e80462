// Helpers shared by the pipeline's tests (tests/pipeline/*_test.cc): the
// single-device reference gradients, the relative difference they are
// compared with, the equivalence check of one (K, M, schedule, remat, v)
// and the process's thread count.
#pragma once

#include <dirent.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "models/transformer.h"
#include "pipeline/pipeline.h"
#include "tests/pipeline/tiny_transformer.h"

namespace gpipe::testing {

inline std::map<std::string, std::vector<float>> reference_grads(Model m, const Batch& b,
                                                                 double* loss) {
  Tensor l = mean_loss(m, b.inputs, b.targets);
  *loss = l.item();
  l.backward();
  std::map<std::string, std::vector<float>> g;
  for (const NamedTensor& p : named_state(m.layers))
    if (p.tensor->requires_grad()) g[p.name] = p.tensor->grad().to_vector<float>();
  return g;
}

inline double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 1e-2,
         diff = 0;  // gradients that are zero in exact arithmetic (key biases) are noise
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::abs(a[i])));
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
  }
  return diff / scale;
}

// One step of a pipeline built with `o` (threads_per_stage 1 unless set)
// against the single-device reference; `inspect` sees the pipeline first.
inline void check_equivalence(PipelineOptions o, int64_t n,
                              const std::function<void(const Pipeline&)>& inspect = {}) {
  INFO("K=" << o.K << " M=" << o.M << " N=" << n << " schedule=" << schedule_name(o.schedule)
            << " remat=" << remat_name(o.remat) << " v=" << o.virtual_stages);
  const Batch batch = token_batch(n, 5);
  double ref_loss = 0;
  const auto ref = reference_grads(models::transformer(tiny()), batch, &ref_loss);
  if (o.threads_per_stage == 0) o.threads_per_stage = 1;
  const int cells = o.K * cells_per_device(o.schedule, o.virtual_stages);
  Pipeline pipe(models::transformer(tiny()), std::move(o), batch);
  REQUIRE(static_cast<int>(pipe.cells().size()) == cells);
  if (inspect) inspect(pipe);
  const StepResult r = pipe.train_step(batch);
  CHECK(r.loss == Approx(ref_loss).epsilon(1e-5));
  int compared = 0;
  for (const NamedTensor& p : pipe.named_state()) {
    if (!ref.count(p.name)) continue;  // buffers
    INFO("parameter " << p.name);
    REQUIRE(p.tensor->grad().defined());
    CHECK(max_rel_diff(p.tensor->grad().to_vector<float>(), ref.at(p.name)) < 2e-5);
    ++compared;
  }
  CHECK(compared == static_cast<int>(ref.size()));
}

inline void check_equivalence(int k, int m, int64_t n, ScheduleKind kind, RematMode remat,
                              int v = 1) {
  check_equivalence({.K = k, .M = m, .virtual_stages = v, .schedule = kind, .remat = remat}, n);
}

inline int thread_count() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n - 2;
}

}  // namespace gpipe::testing
