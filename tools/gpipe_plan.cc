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
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>

#include "core/parallel.h"
#include "models/amoebanet.h"
#include "models/transformer.h"
#include "ops/cpu/blas.h"
#include "pipeline/plan.h"
#include "tools/bench/benchmarks.h"
#include "tools/bench/cli.h"
#include "tools/train/cli_checks.h"
#include "tools/train/config.h"
#include "tools/train/planning.h"
#include "tools/train/task.h"

namespace {

using namespace gpipe;

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
  const int64_t s = c.image_size;
  const bool pixels = c.model == "unet";  // a class per pixel
  std::vector<int64_t> labels(pixels ? n * s * s : n);
  for (auto& l : labels) l = next(pixels ? 2 : 10);
  return {{Tensor::randn(Shape{n, 1, s, s}, 5)},
          {Tensor::from_vector(labels, pixels ? Shape{n, s, s} : Shape{n})}};
}

struct Flags {
  std::string model, memory;
  int K = 1, threads = 1, top = 5, virtual_stages = 2;
  int64_t batch = 0;
  std::vector<int> M;
  std::vector<std::string> schedules, remat;
  std::string svg;
  std::string link = "measured";  // measured | pcie | nvlink | infiniband | <bytes/s>[,<latency s>]
};

// Given figures for links this machine does not have (per direction, one
// pair of devices): PCIe 4.0 x16 about 25 GB/s and 10 us; NVLink 4 (H100 /
// H200) about 450 GB/s and 3 us; NCCL over 400 Gb/s InfiniBand about 45
// GB/s and 8 us. Or "<bytes per second>[,<latency seconds>]", e.g. "10GB,5e-6".
void set_link(const std::string& link, ModelCosts& costs) {
  if (link == "measured") return;
  if (link == "pcie") {
    costs.link_bytes_per_second = 25e9, costs.link_latency_seconds = 10e-6;
  } else if (link == "nvlink") {
    costs.link_bytes_per_second = 450e9, costs.link_latency_seconds = 3e-6;
  } else if (link == "infiniband") {
    costs.link_bytes_per_second = 45e9, costs.link_latency_seconds = 8e-6;
  } else {
    const size_t comma = link.find(',');
    costs.link_bytes_per_second = parse_bytes(link.substr(0, comma));
    costs.link_latency_seconds = 0;
    if (comma != std::string::npos) {
      size_t used = 0;
      try {
        costs.link_latency_seconds = std::stod(link.substr(comma + 1), &used);
      } catch (const std::exception&) {
        used = 0;
      }
      GPIPE_CHECK(used > 0 && used == link.size() - comma - 1 && costs.link_latency_seconds >= 0,
                  "--link: '", link.substr(comma + 1), "' is not a latency in seconds");
    }
    GPIPE_CHECK(costs.link_bytes_per_second > 0, "--link: the bandwidth must be > 0");
  }
  costs.describe += " (link: " + link + ")";
}

int plan(const Flags& f, const std::vector<std::string>& extra) {
  if (f.model.empty())
    throw train::UsageError(
        "--model: required (transformer, amoebanet, amoebanet-b, resnet or unet)");
  std::vector<std::string> args = extra;
  args.push_back("--model=" + f.model);
  if (f.batch > 0) args.push_back("--batch=" + std::to_string(f.batch));
  train::TrainConfig c = train::parse_train_flags(args);
  if (c.batch == 0) c.batch = train::default_batch(c.model);
  c = train::resolve_defaults(c, 1000);
  PlanRequest req;
  req.K = f.K;
  req.batch = c.batch;
  req.memory_bytes = f.memory.empty() ? 0 : parse_bytes(f.memory);
  req.top = f.top;
  req.virtual_stages = f.virtual_stages;
  for (const std::string& s : f.schedules) req.schedules.push_back(parse_schedule(s));
  for (const std::string& r : f.remat) req.remat.push_back(parse_remat(r));
  req.M = f.M.empty() ? train::candidate_micro_batches(c.batch) : f.M;
  for (int m : req.M)
    GPIPE_CHECK(m >= 1 && m <= c.batch, "--M: M = ", m, " for --batch=", c.batch,
                " (expected 1 <= M <= N)");
  set_default_intra_op_threads(f.threads);
  Model model, other;  // the second copy measures two devices computing at once
  int64_t vocab = 0, params = 0;
  if (c.model == "transformer") {
    const models::TransformerConfig tc = train::transformer_config(c);
    vocab = tc.vocab;
    params = models::transformer_parameter_count(tc);
    model = models::transformer(tc);
    if (f.K > 1) other = models::transformer(tc);
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
  set_link(f.link, costs);
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
  CLI::App app{
      "gpipe_plan: the best cuts, M, remat and schedule for a model on K devices under a memory "
      "limit, from the simulator over costs profiled here. Other flags are gpipe_train's model "
      "and optimizer flags (--layers, --dim, --filters, --optimizer, ...)."};
  app.allow_extras();
  Flags f;
  bool validate = false, paper = false;
  gpipe::bench::PlanValidateOptions vo;
  gpipe::bench::PaperPlanOptions po;
  app.add_option("--model", f.model, "transformer | amoebanet | amoebanet-b | resnet | unet");
  gpipe::train::add_renamed_flag(&app, "--devices", "--K");
  gpipe::train::add_renamed_flag(&app, "--micro-batches", "--M");
  gpipe::train::add_renamed_flag(&app, "--validate-micro-batches", "--validate-M");
  app.add_option("--K", f.K, "devices of one pipeline (one cell each; interleaved: v; the Vs: 2)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--memory", f.memory, "memory per device, e.g. 16GB, 512MiB (default: no limit)");
  app.add_option("--batch", f.batch, "N: examples per step (default: the model's)")
      ->check(train::kPositive);
  app.add_option("--M", f.M, "M candidates (default 1, 2, 4, ... <= N)")->delimiter(',');
  app.add_option("--schedules", f.schedules,
                 "candidates (default all): gpipe,1f1b,zb-h1,zb-h1-lowmem,interleaved,zb-v,"
                 "zb-interleaved,v-half,v-min,dualpipev")
      ->delimiter(',');
  app.add_option("--remat", f.remat,
                 "modes a cell may take (default all): never,except_last,always")
      ->delimiter(',');
  app.add_option("--virtual", f.virtual_stages, "v for interleaved")->check(CLI::Range(2, 64));
  app.add_option("--threads", f.threads, "intra-op threads per stage while profiling")
      ->check(CLI::Range(1, 1024));
  app.add_option("--top", f.top, "plans to print")->check(CLI::Range(1, 1000));
  app.add_option("--svg", f.svg, "write the best plan's predicted timeline here");
  app.add_option("--link", f.link,
                 "boundary links: measured (the in-process copy here), pcie (25 GB/s, 10 us), "
                 "nvlink (450 GB/s, 3 us), infiniband (45 GB/s, 8 us) or BYTES_PER_S[,LATENCY_S]")
      ->capture_default_str();
  app.add_flag(
      "--validate", validate,
      "predicted vs measured step time and memory for W3's model here (K = 1, 2; M; remat; "
      "schedules)");
  app.add_option("--validate-M", vo.M, "M for --validate")->delimiter(',');
  app.add_option("--validate-schedules", vo.schedules, "schedules for --validate")->delimiter(',');
  app.add_flag("--validate-every-remat", vo.every_remat,
               "--validate every remat mode for every schedule (else gpipe and 1f1b only)");
  app.add_option("--validate-steps", vo.steps, "timed steps per --validate run");
  app.add_flag("!--no-compare-cuts", vo.compare_cuts,
               "--validate without W3's cost-balanced vs planned cut comparison");
  app.add_flag("--paper", paper,
               "the paper's Table 1 (largest model per K) and Table 2 (speedup per K and M) from "
               "per-layer costs of those models");
  gpipe::bench::MeasureOptions me;
  CLI::App* m = gpipe::bench::add_measure(app, me);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints the message (or the help, rc 0)
    return rc == 0 ? 0 : 2;      // a usage error, as gpipe_train's
  }
  try {
    if (m->parsed()) return gpipe::bench::run_measure(me);
    if ((validate || paper) && !app.remaining().empty())
      throw gpipe::train::UsageError(
          gpipe::detail::concat(validate ? "--validate" : "--paper",
                                " takes no model flags; not expected: ", app.remaining().front()));
    if (validate) {
      std::printf("# compute: %s\n", gpipe::ops::cpu::compute_description().c_str());
      return gpipe::bench::run_plan_validate(vo);
    }
    if (paper) return gpipe::bench::run_plan_paper(po);
    return plan(f, app.remaining());
  } catch (const gpipe::train::UsageError& e) {
    std::fprintf(stderr, "gpipe_plan: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpipe_plan: %s\n", e.what());
    return 1;
  }
}
