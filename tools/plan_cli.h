// gpipe_plan's command line (tools/gpipe_plan.cc): its flags, parsed and
// checked before anything is profiled, so a bad flag costs no profiling run
// and the fuzz harness (tests/fuzz/harness_plan_flags.cc) can reach every
// parser gpipe_plan uses without running one.
#pragma once

#include <string>
#include <vector>

#include "pipeline/plan.h"
#include "tools/bench/benchmarks.h"
#include "tools/train/config.h"

namespace gpipe::plan_cli {

struct PlanFlags {
  std::string model, memory;
  int K = 1, threads = 1, top = 5, virtual_stages = 2;
  int64_t batch = 0;
  std::vector<int> M;
  std::vector<std::string> schedules, remat;
  std::string svg;
  std::string link = "measured";  // measured | pcie | nvlink | infiniband | <bytes/s>[,<latency s>]
  bool validate = false, paper = false, measure = false;
  bench::PlanValidateOptions validate_options;
  bench::PaperPlanOptions paper_options;
  bench::MeasureOptions measure_options;
  std::vector<std::string> extra;  // gpipe_train's model and optimizer flags
};

// What a plan run needs, checked: gpipe_train's config from the model flags
// (defaults resolved), the planner's request, and the link figures (applied
// to the profiled costs by apply_link).
struct PlanSetup {
  train::TrainConfig config;
  PlanRequest request;
};

// Parses gpipe_plan's arguments (without the program name). Throws
// train::HelpRequested for --help and train::UsageError naming the flag for
// anything malformed.
PlanFlags parse_plan_flags(const std::vector<std::string>& args);

// Everything gpipe_plan checks before profiling: the model flags (through
// gpipe_train's parser), --M against --batch, --memory, --schedules, --remat
// and --link. Throws train::UsageError (or gpipe::Error) naming the flag.
// Not for --validate, --paper or the measure subcommand.
PlanSetup prepare_plan(const PlanFlags& flags);

}  // namespace gpipe::plan_cli
