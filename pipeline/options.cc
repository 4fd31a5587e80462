// resolve(): every rule on PipelineOptions in one place, in the order a
// user would fix them: the counts (K, M, R, timeouts), v from the schedule,
// an explicit balance's cells, the device list, then the program itself,
// built in (or given) and dry-run once.
#include "pipeline/options.h"

#include <string>
#include <utility>

#include "core/error.h"

namespace gpipe {
namespace {

// "K = 3" in the library's words, "--K=3" in a flag's.
template <typename T>
std::string said(const std::string& name, const T& value) {
  return name.rfind("--", 0) == 0 ? detail::concat(name, "=", value)
                                  : detail::concat(name, " = ", value);
}

void check_counts(const PipelineOptions& o, const OptionNames& n) {
  GPIPE_CHECK(o.K >= 1, said(n.K, o.K), ": expected >= 1 devices");
  GPIPE_CHECK(o.M >= 1, said(n.M, o.M), ": expected >= 1 micro-batches");
  GPIPE_CHECK(o.replicas >= 1, said(n.replicas, o.replicas), ": expected >= 1 replicas");
  GPIPE_CHECK(o.timeout_seconds > 0, said(n.timeout, o.timeout_seconds),
              ": expected a positive number of seconds");
  GPIPE_CHECK(o.link_delay_seconds >= 0, "link_delay_seconds = ", o.link_delay_seconds,
              ": expected >= 0 seconds");
  GPIPE_CHECK(o.watchdog_seconds >= 0, said(n.watchdog, o.watchdog_seconds),
              ": expected >= 0 seconds (0 = timeout / 2)");
}

// v from the schedule: the V schedules hold two cells on each device; more
// than one needs interleaving. A program from a file brings its own.
void resolve_virtual_stages(PipelineOptions& o, const OptionNames& n) {
  const bool built_in = o.custom_schedule == nullptr;
  const bool v_shape = built_in && v_shaped(o.schedule);
  if (v_shape && o.virtual_stages == 1) o.virtual_stages = 2;
  const int v = o.virtual_stages;
  GPIPE_CHECK(v >= 1, said(n.virtual_stages, v), ": expected >= 1 cells per device");
  GPIPE_CHECK(!v_shape || v == 2, said(n.virtual_stages, v), ": ", schedule_name(o.schedule),
              " holds exactly 2 cells per device (leave ", n.virtual_stages, " out)");
  // GPipe's fill-drain over v cells per device is a schedule of its own (looped BFS).
  GPIPE_CHECK(v == 1 || !built_in || v_shape || interleaved_kind(o.schedule),
              said(n.virtual_stages, v), " cells per device needs the interleaved schedule (",
              said(n.schedule, "interleaved"),
              ", zb-interleaved or looped-bfs, or zb-v with 2 per device; got ",
              said(n.schedule, schedule_name(o.schedule)), ")",
              o.schedule == ScheduleKind::kGPipe
                  ? detail::concat("; GPipe's order over v cells per device is ",
                                   said(n.schedule, "looped-bfs"))
                  : "");
}

// An explicit balance gives the cells, and so K when K was left at 1.
void resolve_balance(PipelineOptions& o, const OptionNames& n) {
  if (o.balance.empty()) return;
  const int v = o.virtual_stages;
  const int given = static_cast<int>(o.balance.size());
  GPIPE_CHECK(o.K == 1 || o.K * v == given, n.balance, " has ", given, " cells but ",
              v > 1
                  ? detail::concat(said(n.K, o.K), " x ", said(n.virtual_stages, v), " = ", o.K * v)
                  : said(n.K, o.K),
              " (give that many sizes, or leave ", n.K, " out)");
  GPIPE_CHECK(given % v == 0, n.balance, " has ", given, " cells, not a multiple of ",
              said(n.virtual_stages, v), " cells per device");
  o.K = given / v;
}

void check_devices(const PipelineOptions& o, const OptionNames& n) {
  const size_t given = o.devices.size();
  GPIPE_CHECK(given <= 1 || static_cast<int>(given) == o.K, n.devices, ": got ", given,
              " devices for ", said(n.K, o.K), " (expected K devices, or one shared by all cells)");
}

// The program: built in, or given (from a file); a training program whose
// cells and devices are the options', dry-run once.
std::pair<Schedule, DryRun> resolve_program(const PipelineOptions& o, const OptionNames& n) {
  const int v = o.virtual_stages, cells = o.K * v;
  Schedule program;
  try {
    program = o.custom_schedule ? *o.custom_schedule
                                : make_schedule(o.schedule, o.K, o.M, o.remat, v, o.order_costs);
  } catch (const Error& e) {
    throw Error(detail::concat(n.schedule, ": ", e.what()));
  }
  GPIPE_CHECK(program.training, n.schedule,
              ": the program is a forward-only one; a training program ('train' in its header) "
              "is needed");
  if (program.cells() != cells && program.device_count() < program.cells())
    throw Error(detail::concat(
        n.schedule, ": the program has ", program.cells(), " cells on ", program.device_count(),
        " devices but ", said(n.K, o.K), " ", said(n.virtual_stages, v), " asks for ", cells,
        program.cells() % program.device_count() == 0
            ? detail::concat(" (run it with ", said(n.K, program.device_count()), " ",
                             said(n.virtual_stages, program.cells() / program.device_count()), ")")
            : std::string(" (the pipeline needs the same number of cells on every device)")));
  DryRun dry_run;
  try {
    dry_run = validate(program, cells, o.M);
  } catch (const Error& e) {
    throw Error(detail::concat(n.schedule, ": ", e.what()));
  }
  GPIPE_CHECK(program.device_count() == o.K, n.schedule, ": the program runs its ", program.cells(),
              " cells on ", program.device_count(), " devices but ", said(n.K, o.K),
              v > 1 ? " " + said(n.virtual_stages, v) : std::string(), " asks for ", o.K,
              " devices");
  return {std::move(program), std::move(dry_run)};
}

}  // namespace

ResolvedOptions resolve(PipelineOptions options, const OptionNames& names) {
  check_counts(options, names);
  resolve_virtual_stages(options, names);
  resolve_balance(options, names);
  check_devices(options, names);
  auto [program, dry_run] = resolve_program(options, names);
  return ResolvedOptions(std::move(options), std::make_shared<const Schedule>(std::move(program)),
                         std::move(dry_run));
}

}  // namespace gpipe
