// gpipe_plan: which cuts, M, remat modes and schedule to train a model with
// on K devices under a memory limit, predicted by the simulator over costs
// measured here (pipeline/plan.h, Note [Planner] in docs/ARCHITECTURE.md).
//
//   bazel run //tools:gpipe_plan -- --model=transformer --K=2 --memory=1GB --batch=32
//       [any of gpipe_train's model flags: --layers=8 --dim=256 ... --optimizer=sgd]
//   bazel run //tools:gpipe_plan -- --validate     # predicted vs measured, W3's model here
//   bazel run //tools:gpipe_plan -- --paper        # the paper's Tables 1 and 2, on paper
//
// The model is profiled on synthetic inputs of its largest shapes
// (Transformer: --max-len + 1 tokens per side; AmoebaNet: --image-size).
#include <cstdio>
#include <fstream>

#include "core/parallel.h"
#include "core/system_limits.h"
#include "models/amoebanet.h"
#include "models/lm.h"
#include "models/transformer.h"
#include "ops/cpu/blas.h"
#include "pipeline/plan.h"
#include "tools/bench/benchmarks.h"
#include "tools/plan_cli.h"
#include "tools/train/config.h"
#include "tools/train/planning.h"
#include "tools/train/report.h"
#include "tools/train/task.h"
#include "tools/train/version.h"

using namespace gpipe;

namespace {

int64_t lm_context(const train::TrainConfig& c) { return train::lm_model_config(c).context; }

Batch synthetic_batch(const train::TrainConfig& c, int64_t vocab) {
  const int64_t n = c.batch;
  uint64_t x = 99;
  auto next = [&](int64_t mod) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>((x >> 33) % mod);
  };
  if (c.model == "transformer") {
    const int64_t len = c.max_len + 1;
    std::vector<int64_t> src(n * len), tin(n * len), tout(n * len);
    for (auto* v : {&src, &tin, &tout})
      for (auto& t : *v) t = 1 + next(vocab - 1);
    return {{Tensor::from_vector(src, Shape{n, len}), Tensor::from_vector(tin, Shape{n, len})},
            {Tensor::from_vector(tout, Shape{n, len})}};
  }
  if (train::lm_model(
          c.model)) {  // rows of --context tokens (128 by default) and their next tokens
    const int64_t len = c.context > 0 ? c.context : std::min<int64_t>(128, lm_context(c));
    std::vector<int64_t> in(n * len), out(n * len);
    for (auto* v : {&in, &out})
      for (auto& t : *v) t = next(vocab);
    return {{Tensor::from_vector(in, Shape{n, len})}, {Tensor::from_vector(out, Shape{n, len})}};
  }
  const int64_t s = c.image_size;
  const bool pixels = c.model == "unet";  // a class per pixel
  std::vector<int64_t> labels(pixels ? n * s * s : n);
  for (auto& l : labels) l = next(pixels ? 2 : 10);
  return {{Tensor::randn(Shape{n, 1, s, s}, 5)},
          {Tensor::from_vector(labels, pixels ? Shape{n, s, s} : Shape{n})}};
}

// The planner profiles the model by building it (twice for K > 1): a model
// whose weights alone pass this machine's memory is refused at once, naming
// the figure (Note [Preflight] in tools/train/preflight.cc), not built for
// minutes until the kernel ends the process.
void check_profiling_fits(const train::TrainConfig& c, int K) {
  const SystemLimit limit = usable_memory();
  const double copies = K > 1 ? 2 : 1;
  const double params = static_cast<double>(train::parameter_count(c));
  const double need = params * 4 * copies;
  GPIPE_CHECK(limit.value == 0 || need <= static_cast<double>(limit.value),
              "gpipe_plan profiles the model by building it", K > 1 ? " twice" : "", ": ",
              format_bytes(need), " of float32 weights (",
              train::with_commas(static_cast<int64_t>(params)), " parameters), more than the ",
              format_bytes(static_cast<double>(limit.value)), " this process may use (",
              limit.source,
              "). Profile a shallower model of the same widths (--layers) on this machine, or "
              "plan on a larger one; gpipe_plan --paper plans the paper's sizes from one "
              "profiled layer, and gpipe_train --print-params prints the count");
}

int plan(const plan_cli::PlanFlags& f) {
  plan_cli::PlanSetup setup = plan_cli::prepare_plan(f);
  const train::TrainConfig& c = setup.config;
  PlanRequest& req = setup.request;
  set_default_intra_op_threads(f.threads);
  check_profiling_fits(c, f.K);
  Model model, other;  // the second copy measures two devices computing at once
  int64_t vocab = 0, params = 0;
  if (c.model == "transformer") {
    const models::TransformerConfig tc = train::transformer_config(c);
    vocab = tc.vocab;
    params = models::transformer_parameter_count(tc);
    model = models::transformer(tc);
    if (f.K > 1) other = models::transformer(tc);
  } else if (train::lm_model(c.model)) {
    const models::LmConfig lc = train::lm_model_config(c);
    vocab = lc.vocab;
    params = models::lm_parameter_count(lc);
    model = models::language_model(lc);
    if (f.K > 1) other = models::language_model(lc);
  } else {
    params = train::parameter_count(c);
    model = train::make_model(c);
    if (f.K > 1) other = train::make_model(c);
  }
  GPIPE_CHECK(static_cast<int64_t>(model.layers.size()) >= f.K, "--K: K = ", f.K,
              " devices but the ", c.model, " has ", model.layers.size(),
              " layers (each device needs at least one)");
  std::printf("# compute: %s\n", ops::cpu::compute_description().c_str());
  std::printf("# %s: %ld parameters, %zu layers; %s (state %.0f x the parameters); N = %ld, K = %d",
              c.model.c_str(), static_cast<long>(params), model.layers.size(), c.optimizer.c_str(),
              train::optimizer_state_factor(c), static_cast<long>(c.batch), f.K);
  std::printf(", memory %s per device; precision %s\n",
              req.memory_bytes > 0 ? format_bytes(req.memory_bytes).c_str() : "unlimited",
              c.precision.c_str());
  const Batch sample = synthetic_batch(c, vocab);
  ModelCosts costs =
      train::training_costs(c, model, sample, req.M, f.K > 1 ? &other : nullptr, f.threads);
  apply_link(f.link, costs);
  std::printf("# costs: %s, %d thread(s); optimizer step %s; link %.1f us + %.2f GB/s\n",
              costs.describe.c_str(), f.threads, format_seconds(costs.optimizer_seconds).c_str(),
              costs.link_latency_seconds * 1e6, costs.link_bytes_per_second / 1e9);
  const PlanResult r = make_plan(costs, req);
  std::printf("%s", format_plan(r, req.memory_bytes).c_str());
  if (!r.plans.empty()) {
    const PlanEstimate& best = r.plans[0];
    std::printf("# gpipe_train flags: --K=%d --M=%d --schedule=%s", f.K, best.choice.M,
                schedule_name(best.choice.schedule).c_str());
    const bool uniform = best.choice.uniform_remat();
    if (uniform) std::printf(" --remat=%s", best.choice.remat_text().c_str());
    if (interleaved_kind(best.choice.schedule))
      std::printf(" --virtual=%d", best.choice.virtual_stages);
    if (best.choice.order_latency > 0)
      std::printf(" --order-latency=%.3g", best.choice.order_latency);
    if (c.precision != "fp32") std::printf(" --precision=%s", c.precision.c_str());
    std::printf(" --balance=%s%s\n", best.choice.balance_text().c_str(),
                uniform ? "" : " (remat differs per cell: --plan=auto runs it)");
    if (!f.svg.empty()) {
      std::vector<std::string> names;
      for (int d = 0; d < best.sim.devices(); ++d) names.push_back("device " + std::to_string(d));
      std::ofstream out(f.svg);
      out << timeline_svg(timeline_events(best.sim), names, "seconds (predicted)");
      GPIPE_CHECK(out.good(), "--svg: cannot write '", f.svg, "'");
      std::printf("# wrote the best plan's predicted timeline to %s\n", f.svg.c_str());
    }
  }
  return r.plans.empty() ? 3 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (gpipe::print_version_if_asked(argc, argv, "gpipe_plan")) return 0;
  try {
    const plan_cli::PlanFlags f =
        plan_cli::parse_plan_flags(std::vector<std::string>(argv + 1, argv + argc));
    if (f.measure) return bench::run_measure(f.measure_options);
    if (f.validate) {
      std::printf("# compute: %s\n", ops::cpu::compute_description().c_str());
      return bench::run_plan_validate(f.validate_options);
    }
    if (f.paper) return bench::run_plan_paper(f.paper_options);
    return plan(f);
  } catch (const train::HelpRequested& h) {
    std::printf("%s", h.text.c_str());
    return 0;
  } catch (const train::UsageError& e) {
    std::fprintf(stderr, "gpipe_plan: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpipe_plan: %s\n", e.what());
    return 1;
  }
}
