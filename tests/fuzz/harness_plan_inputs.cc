// Fuzz harness: what gpipe_plan reads from its command line besides
// gpipe_train's flags (those have the train_flags harness): the input's
// lines are, in turn, a memory size (--memory), a link (--link), schedule
// names (--schedules) and remat modes (--remat). A size must come back
// finite and non-negative, a link with a positive bandwidth and a finite
// latency.
#include <cmath>
#include <string>
#include <vector>

#include "pipeline/plan.h"
#include "pipeline/remat.h"
#include "pipeline/schedule.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> lines = gpipe::fuzz::split_lines(gpipe::fuzz::bytes(data, size), 4);
  lines.resize(4);
  gpipe::fuzz::refusing_bad_input([&] {
    const double bytes = gpipe::parse_bytes(lines[0]);
    if (!std::isfinite(bytes) || bytes < 0) __builtin_trap();
  });
  gpipe::fuzz::refusing_bad_input([&] {
    gpipe::ModelCosts costs;
    costs.link_bytes_per_second = 1e9;
    gpipe::apply_link(lines[1], costs);
    if (!(costs.link_bytes_per_second > 0) || !std::isfinite(costs.link_bytes_per_second) ||
        !std::isfinite(costs.link_latency_seconds) || costs.link_latency_seconds < 0)
      __builtin_trap();
  });
  gpipe::fuzz::refusing_bad_input([&] { (void)gpipe::parse_schedule(lines[2]); });
  gpipe::fuzz::refusing_bad_input([&] { (void)gpipe::parse_remat(lines[3]); });
  return 0;
}
