// Fuzz harness: gpipe_plan's command line. The input is split at newlines
// into arguments (without the program name), parsed by parse_plan_flags and
// checked by prepare_plan (gpipe_train's model flags, --M against --batch,
// --memory, --schedules, --remat, --link): everything gpipe_plan does before
// it profiles a model. --help is accepted (HelpRequested). Arguments naming
// files (--svg, and any file: schedule) are dropped so the harness never
// touches the machine's files.
#include <string>
#include <vector>

#include "tests/fuzz/fuzz.h"
#include "tools/plan_cli.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  for (std::string& a : gpipe::fuzz::split_lines(gpipe::fuzz::bytes(data, size), 64)) {
    // gpipe_plan's own: --svg writes a file, the measure subcommand runs one.
    if (!gpipe::fuzz::names_file(a) && a.rfind("--svg", 0) != 0 && a != "measure")
      args.push_back(std::move(a));
  }
  try {
    gpipe::fuzz::refusing_bad_input([&] {
      const gpipe::plan_cli::PlanFlags f = gpipe::plan_cli::parse_plan_flags(args);
      if (!f.validate && !f.paper && !f.measure) (void)gpipe::plan_cli::prepare_plan(f);
    });
  } catch (const gpipe::train::HelpRequested&) {
  }
  return 0;
}
