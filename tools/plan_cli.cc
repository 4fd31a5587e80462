#include "tools/plan_cli.h"

#include <CLI/CLI.hpp>

#include "tools/bench/cli.h"
#include "tools/train/cli_checks.h"
#include "tools/train/planning.h"

namespace gpipe::plan_cli {
namespace {

// A flag's value refused by its parser is a usage error (exit status 2),
// named by the flag when the parser's message does not name it already.
template <class F>
auto as_usage(const char* flag, F&& parse) {
  try {
    return parse();
  } catch (const train::UsageError&) {
    throw;
  } catch (const Error& e) {
    const std::string what = e.what();
    throw train::UsageError(what.rfind(flag, 0) == 0 ? what : detail::concat(flag, ": ", what));
  }
}

}  // namespace

PlanFlags parse_plan_flags(const std::vector<std::string>& args) {
  PlanFlags f;
  CLI::App app{
      "gpipe_plan: the best cuts, M, remat and schedule for a model on K devices under a memory "
      "limit, from the simulator over costs profiled here. Other flags are gpipe_train's model "
      "and optimizer flags (--layers, --dim, --filters, --optimizer, ...)."};
  app.allow_extras();
  app.add_option("--model", f.model, "transformer | amoebanet | amoebanet-b | resnet | unet");
  train::add_renamed_flag(&app, "--devices", "--K");
  train::add_renamed_flag(&app, "--micro-batches", "--M");
  train::add_renamed_flag(&app, "--validate-micro-batches", "--validate-M");
  app.add_option("--K", f.K, "devices of one pipeline (one cell each; interleaved: v; the Vs: 2)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--memory", f.memory, "memory per device, e.g. 16GB, 512MiB (default: no limit)");
  app.add_option("--batch", f.batch, "N: examples per step (default: the model's)")
      ->check(train::kPositive);
  app.add_option("--M", f.M, "M candidates (default 1, 2, 4, ... <= N)")->delimiter(',');
  app.add_option("--schedules", f.schedules,
                 "candidates (default all): gpipe,1f1b,zb-h1,zb-h1-lowmem,interleaved,zb-v,"
                 "zb-interleaved,v-half,v-min,dualpipev,looped-bfs")
      ->delimiter(',');
  app.add_option("--remat", f.remat,
                 "modes a cell may take (default all): never,except_last,always")
      ->delimiter(',');
  app.add_option("--virtual", f.virtual_stages, "v for interleaved, zb-interleaved, looped-bfs")
      ->check(CLI::Range(2, 64));
  app.add_option("--threads", f.threads, "intra-op threads per stage while profiling")
      ->check(CLI::Range(1, 1024));
  app.add_option("--top", f.top, "plans to print")->check(CLI::Range(1, 1000));
  app.add_option("--svg", f.svg, "write the best plan's predicted timeline here");
  app.add_option("--link", f.link,
                 "boundary links: measured (the in-process copy here), pcie (25 GB/s, 10 us), "
                 "nvlink (450 GB/s, 3 us), infiniband (45 GB/s, 8 us) or BYTES_PER_S[,LATENCY_S]")
      ->capture_default_str();
  app.add_flag(
      "--validate", f.validate,
      "predicted vs measured step time and memory for W3's model here (K = 1, 2; M; remat; "
      "schedules)");
  app.add_option("--validate-M", f.validate_options.M, "M for --validate")->delimiter(',');
  app.add_option("--validate-schedules", f.validate_options.schedules, "schedules for --validate")
      ->delimiter(',');
  app.add_flag("--validate-every-remat", f.validate_options.every_remat,
               "--validate every remat mode for every schedule (else gpipe and 1f1b only)");
  app.add_option("--validate-steps", f.validate_options.steps, "timed steps per --validate run");
  app.add_flag("!--no-compare-cuts", f.validate_options.compare_cuts,
               "--validate without W3's cost-balanced vs planned cut comparison");
  app.add_flag("--paper", f.paper,
               "the paper's Table 1 (largest model per K) and Table 2 (speedup per K and M) from "
               "per-layer costs of those models");
  CLI::App* m = bench::add_measure(app, f.measure_options);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    throw train::HelpRequested{app.help()};
  } catch (const CLI::CallForAllHelp&) {
    throw train::HelpRequested{app.help("", CLI::AppFormatMode::All)};
  } catch (const CLI::ParseError& e) {
    throw train::UsageError(e.what());
  }
  f.measure = m->parsed();
  f.extra = app.remaining();
  if ((f.validate || f.paper) && !f.extra.empty())
    throw train::UsageError(
        detail::concat(f.validate ? "--validate" : "--paper",
                       " takes no model flags; not expected: ", f.extra.front()));
  return f;
}

PlanSetup prepare_plan(const PlanFlags& f) {
  if (f.model.empty())
    throw train::UsageError(
        "--model: required (transformer, gpt2, llama, amoebanet, amoebanet-b, resnet or unet)");
  std::vector<std::string> args = f.extra;
  args.push_back("--model=" + f.model);
  if (f.batch > 0) args.push_back("--batch=" + std::to_string(f.batch));
  PlanSetup s;
  train::TrainConfig& c = s.config;
  c = train::parse_train_flags(args);
  if (c.batch == 0) c.batch = train::default_batch(c.model);
  c = train::resolve_defaults(c, 1000);
  PlanRequest& req = s.request;
  req.K = f.K;
  req.batch = c.batch;
  req.memory_bytes =
      f.memory.empty() ? 0 : as_usage("--memory", [&] { return parse_bytes(f.memory); });
  req.top = f.top;
  req.virtual_stages = f.virtual_stages;
  for (const std::string& name : f.schedules)
    req.schedules.push_back(as_usage("--schedules", [&] { return parse_schedule(name); }));
  for (const std::string& r : f.remat)
    req.remat.push_back(as_usage("--remat", [&] { return parse_remat(r); }));
  req.M = f.M.empty() ? train::candidate_micro_batches(c.batch) : f.M;
  for (int m : req.M)
    if (m < 1 || m > c.batch)
      throw train::UsageError(
          detail::concat("--M: M = ", m, " for --batch=", c.batch, " (expected 1 <= M <= N)"));
  ModelCosts link_check;  // --link is checked here, applied to the profiled costs later
  as_usage("--link", [&] {
    apply_link(f.link, link_check);
    return 0;
  });
  return s;
}

}  // namespace gpipe::plan_cli
