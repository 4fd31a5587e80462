// Note [Preflight]. Building the paper's T(64,16384,32) on a workstation took
// minutes of growing memory before the kernel killed it, and --threads=5000
// filled the machine's process table. Both are known before anything is
// built: the parameter count comes from each model's formula (the same one
// --print-params prints), the bytes per parameter from the precision and the
// optimizer, and the threads from K, v and --threads. The memory figure is an
// estimate: exact for parameters, gradients and optimizer state, a lower bound
// for activations (each cell keeps at least its inputs for the whole
// mini-batch until its backward). It is compared with the smallest of the
// machine's memory, the cgroup's limit and RLIMIT_AS (core/system_limits.h);
// a run that passes can still fail later, cleanly, in the allocator.
#include "tools/train/preflight.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <sstream>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/system_limits.h"
#include "models/transformer.h"
#include "pipeline/plan.h"
#include "tools/train/report.h"
#include "tools/train/task.h"

namespace gpipe::train {
namespace {

constexpr int kThreadsPerCoreAllowed = 4;  // --threads beyond 4x the cores is refused
constexpr int kTotalThreadsPerCore = 64;   // all of a process's threads together

}  // namespace

MemoryEstimate estimate_memory(const TrainConfig& config) {
  const TrainConfig c = resolve_defaults(config, 1);  // the optimizer and batch defaults
  MemoryEstimate e;
  e.parameters = parameter_count(c);
  const bool half = c.precision == "bf16" || c.precision == "fp16";
  int64_t per = 8;  // float32 weights and gradients
  std::string detail = "float32 weights and gradients";
  if (c.optimizer == "adam" || c.optimizer == "adamw") {
    per += 8;
    detail += ", " + c.optimizer + "'s two moments";
  } else if (c.optimizer == "rmsprop") {
    per += c.momentum.value_or(0) > 0 ? 8 : 4;
    detail += c.momentum.value_or(0) > 0 ? ", RMSProp's square average and momentum"
                                         : ", RMSProp's square average";
  } else if (c.momentum.value_or(0) > 0) {
    per += 4;
    detail += ", SGD's momentum";
  }
  if (half) {
    per += 2;
    detail += ", 16-bit weight copies";
  }
  e.bytes_per_parameter = per;
  e.per_parameter_detail = detail;
  e.parameter_bytes = static_cast<double>(e.parameters) * static_cast<double>(per);
  // Each cell keeps its input for every example of the mini-batch.
  const double act = half ? 2 : 4;
  double per_example = 0;
  if (image_model(c.model)) {
    per_example = static_cast<double>(c.image_size) * static_cast<double>(c.image_size) * act;
  } else if (lm_model(c.model)) {
    const models::LmConfig m = lm_model_config(c);
    const double t =
        static_cast<double>(c.context > 0 ? c.context : std::min<int64_t>(m.context, 128));
    per_example = t * static_cast<double>(m.dim) * act;
  } else {
    const models::TransformerConfig t = transformer_config(c);
    // The encoder's and the decoder's streams.
    per_example = 2.0 * static_cast<double>(c.max_len) * static_cast<double>(t.dim) * act;
  }
  const int64_t cells = static_cast<int64_t>(c.K) * c.virtual_stages;
  e.activation_bytes = static_cast<double>(c.batch) * per_example * static_cast<double>(cells);
  return e;
}

// --devices with GPUs: each device's share of the estimate (its cells') against
// its free memory, asked of the CUDA runtime (none without --config=cuda).
void check_device_memory(const TrainConfig& c, const MemoryEstimate& e, int cells_total) {
  std::vector<std::string> devices;
  std::stringstream in(c.devices);
  for (std::string d; std::getline(in, d, ',');) devices.push_back(d);
  std::map<std::string, int> cells_on;
  for (int i = 0; i < cells_total; ++i) ++cells_on[devices[i % devices.size()]];
  for (const auto& [name, cells] : cells_on) {
    if (name.rfind("cuda:", 0) != 0) continue;
    const SystemLimit free =
        device_free_memory(static_cast<int>(DeviceType::kCUDA), std::stoi(name.substr(5)), name);
    if (free.value == 0) continue;
    const double need = e.total_bytes() * cells / std::max(1, cells_total);
    if (need <= static_cast<double>(free.value)) continue;
    throw Error(detail::concat(
        "out of memory on ", name, ": --model=", c.model, " needs about ", format_bytes(need),
        " for its ", cells, " cell(s), more than the ",
        format_bytes(static_cast<double>(free.value)), " of ", free.source,
        " (an estimate: ", with_commas(e.parameters), " parameters x ", e.bytes_per_parameter,
        " bytes, plus at least ", format_bytes(e.activation_bytes),
        " of activations over all cells). Ways out: more cells (--K) over more devices, "
        "--precision=bf16, a smaller --batch or model, more --M with --remat=always; "
        "`gpipe_plan --memory=SIZE` finds a plan that fits"));
  }
}

void check_memory(const TrainConfig& c, int cells_here, int cells_total, int ranks_on_host) {
  if (c.devices.find("cuda") != std::string::npos) {
    if (cells_here == cells_total) check_device_memory(c, estimate_memory(c), cells_total);
    return;
  }
  const SystemLimit limit = usable_memory();
  if (limit.value == 0) return;
  const MemoryEstimate e = estimate_memory(c);
  const double share = static_cast<double>(cells_here) / std::max(1, cells_total);
  const double need = e.total_bytes() * share;
  const double have = static_cast<double>(limit.value) / std::max(1, ranks_on_host);
  if (need <= have) return;
  const std::string where =
      cells_here == cells_total
          ? detail::concat("this process (", cells_total, cells_total == 1 ? " cell)" : " cells)")
          : std::string("each rank (") + std::to_string(cells_here) + " of " +
                std::to_string(cells_total) + " cells, " + std::to_string(ranks_on_host) +
                " rank(s) on this host)";
  throw Error(detail::concat(
      "out of memory on cpu: --model=", c.model, c.preset.empty() ? "" : " --preset=" + c.preset,
      " needs about ", format_bytes(need), " for ", where, ", more than the ", format_bytes(have),
      " it may use (", limit.source, ranks_on_host > 1 ? ", shared by the host's ranks" : "",
      "). The estimate: ",
      e.parameters == INT64_MAX ? std::string("more than 9.2e18") : with_commas(e.parameters),
      " parameters x ", e.bytes_per_parameter, " bytes (", e.per_parameter_detail,
      ") = ", format_bytes(e.parameter_bytes), ", plus at least ", format_bytes(e.activation_bytes),
      " of activations (each cell's inputs for the mini-batch). Ways out: more cells (--K) "
      "spread over more processes or hosts (mpirun), --precision=bf16, a smaller --batch or "
      "model, more --M with --remat=always; `gpipe_plan --memory=SIZE` finds a plan that fits "
      "and --print-params prints the count without building anything"));
}

int64_t planned_threads(int cells_here, int threads_per_cell) {
  // Each cell's worker pool, the caller's pool of all of them, the loader and the watchdog.
  return 2 * static_cast<int64_t>(cells_here) * threads_per_cell + 2;
}

void check_threads(const TrainConfig& c, int cells_here, std::ostream& log) {
  const SystemLimit cores = usable_cores();
  const int64_t n = static_cast<int64_t>(cores.value);
  if (c.threads > kThreadsPerCoreAllowed * n)
    throw Error(detail::concat(
        "--threads=", c.threads, ": far more threads than the ", n,
        " core(s) this process may use (", cores.source, "); at most ", kThreadsPerCoreAllowed * n,
        " (", kThreadsPerCoreAllowed, "x the cores) are allowed, and more than ", n,
        " only slows each step; try --threads=", std::max<int64_t>(1, n / c.K)));
  const int per_cell = c.threads > 0 ? c.threads : std::max<int>(1, static_cast<int>(n) / c.K);
  const int64_t planned = planned_threads(cells_here, per_cell);
  if (planned > kTotalThreadsPerCore * std::max<int64_t>(n, 4))
    throw Error(detail::concat(cells_here, " cells of ", per_cell, " thread(s) each start ",
                               planned, " threads, far more than the ", n,
                               " core(s) this process "
                               "may use (",
                               cores.source,
                               "); use fewer cells (--K, --virtual) "
                               "or --threads, or spread the cells over processes with mpirun"));
  const SystemLimit nproc = process_limit();
  if (nproc.value > 0) {
    const int64_t used = user_threads_now();
    const int64_t free = static_cast<int64_t>(nproc.value) - used;
    if (planned > free)
      throw Error(detail::concat(cells_here, " cells of ", per_cell, " thread(s) each need ",
                                 planned, " threads, but ", nproc.source, " allows ", nproc.value,
                                 " threads and processes for this user and ", used,
                                 " are running (", std::max<int64_t>(0, free),
                                 " left); use fewer cells (--K) or --threads, or raise ulimit -u"));
  }
  if (c.threads > n)
    log << "note: --threads=" << c.threads << " is more than the " << n
        << " core(s) this process may use (" << cores.source
        << "); oversubscribed threads make each step slower\n";
}

}  // namespace gpipe::train
