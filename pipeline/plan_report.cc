// The planner's report: sizes and times as text ("16GB" <-> bytes,
// "1.23 ms") and the plans and rejections as a table.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "core/autograd.h"
#include "core/error.h"
#include "core/parallel.h"
#include "pipeline/microbatch.h"
#include "pipeline/partition.h"
#include "pipeline/plan.h"

namespace gpipe {

std::string format_seconds(double s) {
  char buf[32];
  if (s >= 1)
    std::snprintf(buf, sizeof buf, "%.3f s", s);
  else
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  return buf;
}

double parse_bytes(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  static const std::map<std::string, double> units = {{"", 1},
                                                      {"B", 1},
                                                      {"K", 1e3},
                                                      {"KB", 1e3},
                                                      {"M", 1e6},
                                                      {"MB", 1e6},
                                                      {"G", 1e9},
                                                      {"GB", 1e9},
                                                      {"T", 1e12},
                                                      {"TB", 1e12},
                                                      {"KIB", 1024},
                                                      {"MIB", 1048576.0},
                                                      {"GIB", 1073741824.0},
                                                      {"TIB", 1099511627776.0}};
  auto it = units.find(unit);
  GPIPE_CHECK(used > 0 && it != units.end() && std::isfinite(v) && v >= 0, "'", text,
              "' is not a memory size (expected e.g. 16GB, 512MiB, 8e9)");
  // The unit can carry a finite number past what a double holds ("1e300TB").
  GPIPE_CHECK(v * it->second < 1e30, "'", text, "' is not a plausible size (at most 1e30 bytes)");
  return v * it->second;
}

void apply_link(const std::string& link, ModelCosts& costs) {
  if (link == "measured") return;
  if (link == "pcie") {
    costs.link_bytes_per_second = 25e9, costs.link_latency_seconds = 10e-6;
  } else if (link == "nvlink") {
    costs.link_bytes_per_second = 450e9, costs.link_latency_seconds = 3e-6;
  } else if (link == "infiniband") {
    costs.link_bytes_per_second = 45e9, costs.link_latency_seconds = 8e-6;
  } else {
    const size_t comma = link.find(',');
    try {
      costs.link_bytes_per_second = parse_bytes(link.substr(0, comma));
    } catch (const Error&) {
      throw Error(detail::concat("--link: '", link, "' is not measured, pcie, nvlink, infiniband ",
                                 "or BYTES_PER_S[,LATENCY_S] (e.g. 10GB,5e-6)"));
    }
    costs.link_latency_seconds = 0;
    if (comma != std::string::npos) {
      const std::string latency = link.substr(comma + 1);
      size_t used = 0;
      double seconds = -1;
      try {
        seconds = std::stod(latency, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      GPIPE_CHECK(used > 0 && used == latency.size() && std::isfinite(seconds) && seconds >= 0 &&
                      seconds < 1e6,
                  "--link: '", latency, "' is not a latency in seconds (expected e.g. 5e-6)");
      costs.link_latency_seconds = seconds;
    }
    GPIPE_CHECK(costs.link_bytes_per_second > 0, "--link: the bandwidth must be > 0");
  }
  costs.describe += " (link: " + link + ")";
}

std::string format_bytes(double bytes) {
  char buf[32];
  if (bytes >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  else if (bytes >= 1e6)
    std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.1f kB", bytes / 1e3);
  return buf;
}

std::string format_plan(const PlanResult& r, double memory_bytes, int max_rejections) {
  std::ostringstream os;
  if (r.plans.empty()) {
    if (memory_bytes > 0)
      os << "no plan fits " << format_bytes(memory_bytes) << " per device\n";
    else
      os << "no candidate plan (see the rejections)\n";
  } else {
    char line[256];
    std::snprintf(line, sizeof line, "%4s  %-44s %10s %7s  %s\n", "rank", "plan", "step", "bubble",
                  "peak memory per device");
    os << line;
    for (size_t i = 0; i < r.plans.size(); ++i) {
      const PlanEstimate& e = r.plans[i];
      std::string mem;
      for (const DeviceMemoryPrediction& d : e.memory)
        mem += detail::concat(mem.empty() ? "" : "  ", format_bytes(d.total()));
      std::snprintf(line, sizeof line, "%4zu  %-44s %10s %7.3f  %s\n", i + 1,
                    e.choice.describe().c_str(), format_seconds(e.step_seconds).c_str(),
                    e.sim.bubble_fraction, mem.c_str());
      os << line;
    }
  }
  if (!r.plans.empty()) {
    os << "plan 1's memory by category (parameters and buffers, gradients, optimizer state, "
          "activations at their peak, activations and gradients together at their peak, "
          "workspace):\n";
    const std::vector<DeviceMemoryPrediction>& m = r.plans[0].memory;
    for (size_t d = 0; d < m.size(); ++d)
      os << "  device " << d << ": " << format_bytes(m[d].parameters) << ", "
         << format_bytes(m[d].gradients) << ", " << format_bytes(m[d].optimizer) << ", "
         << format_bytes(m[d].activations) << ", " << format_bytes(m[d].activations_with_gradients)
         << ", " << format_bytes(m[d].workspace) << " = " << format_bytes(m[d].total()) << "\n";
  }
  if (!r.rejected.empty()) {
    os << "rejected (" << r.rejected.size() << "):\n";
    int shown = 0;
    // Out-of-memory reasons first: they say what would not fit.
    for (int pass = 0; pass < 2; ++pass)
      for (const Rejection& x : r.rejected) {
        const bool oom = x.why.rfind("out of memory", 0) == 0;
        if ((pass == 0) != oom) continue;
        if (shown++ >= max_rejections) continue;
        os << "  " << x.choice << ": " << x.why << "\n";
      }
    if (shown > max_rejections) os << "  ... and " << shown - max_rejections << " more\n";
  }
  return os.str();
}

}  // namespace gpipe
