// What a Pipeline reports about itself: the cell table, memory per device,
// the timeline and the bytes its links sent.
#include <cstdio>
#include <set>
#include <sstream>

#include "pipeline/pipeline.h"
#include "pipeline/simulate.h"

namespace gpipe {

std::vector<CellInfo> Pipeline::cells() const { return cells_; }

std::string Pipeline::describe() const {
  std::ostringstream os;
  const auto& cs = cells_;
  char line[256];
  const char* cost_label = !opt_.balance.empty()                   ? "cost (given)"
                           : opt_.balance_by == BalanceBy::kTime   ? "seconds"
                           : opt_.balance_by == BalanceBy::kMemory ? "bytes"
                                                                   : "FLOPs";
  auto names_of = [&](const CellInfo& c) {
    return layer_names_[c.first_layer] + ".." + layer_names_[c.last_layer - 1];
  };
  int width = 28;  // the first..last column fits the longest pair of layer names
  for (const CellInfo& c : cs) width = std::max(width, static_cast<int>(names_of(c).size()));
  width = std::min(width, 120);
  std::snprintf(line, sizeof(line), "%-5s %-8s %-12s %-*s %14s %12s %10s\n", "cell", "device",
                "layers", width, "first..last", cost_label, "parameters", "param MB");
  os << line;
  for (size_t s = 0; s < cs.size(); ++s) {
    const std::string range =
        "[" + std::to_string(cs[s].first_layer) + ", " + std::to_string(cs[s].last_layer) + ")";
    std::snprintf(line, sizeof(line), "%-5zu %-8s %-12s %-*s %14.4g %12ld %10.2f\n", s,
                  cs[s].device.str().c_str(), range.c_str(), width, names_of(cs[s]).c_str(),
                  cs[s].cost, static_cast<long>(cs[s].parameters),
                  cell_param_bytes_[s] / 1048576.0);
    os << line;
  }
  if (opt_.custom_schedule)
    os << "schedule from text, M = " << opt_.M;
  else
    os << "schedule " << schedule_name(opt_.schedule) << ", M = " << opt_.M << ", remat "
       << remat_name(opt_.remat);
  const BubbleFormula bubble = bubble_formula();
  os << ", ideal bubble " << bubble.text << " = " << bubble.value << "\n";
  if (measured_link_)
    os << gpipe::describe(*measured_link_, opt_.custom_schedule ? "a program from text"
                                                                : schedule_name(opt_.schedule))
       << "\n";
  os << "dry run: " << dry_run_.makespan << " ticks; peak live micro-batches per stage";
  for (size_t s = 0; s < dry_run_.peak_live.size(); ++s)
    os << (s ? "/" : " ") << dry_run_.peak_live[s];
  os << "\n";
  if (opt_.world) {
    const int devices = schedule_.device_count(), cells = static_cast<int>(partition_.cells());
    os << "processes: " << info_.world_size << " = "
       << (devices < cells ? detail::concat("K ", devices, " x v ", cells / devices)
                           : detail::concat("K ", cells))
       << " x R " << opt_.replicas << " (" << rank_layout_name(opt_.layout)
       << "-major ranks, one per cell), links over " << ranks_.front()->link_kind() << "\n";
  }
  return os.str();
}

BubbleFormula Pipeline::bubble_formula() const {
  const int k = static_cast<int>(cells_.size()), devices = schedule_.device_count();
  if (!opt_.custom_schedule)
    return gpipe::bubble_formula(opt_.schedule, devices, opt_.M, k / devices);
  const double per_cell = static_cast<double>(devices) / k;  // a device's work split over its cells
  const Simulation sim = simulate(schedule_, CostModel::uniform(k, per_cell, 2.0 * per_cell));
  return {sim.bubble_fraction, "simulated (F = 1, B = 2)"};
}

std::vector<DeviceMemory> Pipeline::memory() const {
  std::vector<DeviceMemory> out;
  std::set<std::pair<int, int>> seen;
  for (const auto& r : ranks_) {
    const Device d = r->stage().device();
    if (!seen.insert({static_cast<int>(d.type), d.index}).second) continue;
    const MemoryStats s = allocator_for(d).stats();
    out.push_back({d, s.live_bytes(MemoryCategory::kParameter),
                   s.live_bytes(MemoryCategory::kGradient),
                   s.live_bytes(MemoryCategory::kOptimizerState),
                   s.peak_bytes(MemoryCategory::kActivation), s.peak_total, s.live_total});
  }
  return out;
}

void Pipeline::reset_memory_peaks() {
  for (const auto& r : ranks_) allocator_for(r->stage().device()).reset_peak();
}

void Pipeline::write_trace(const std::string& path) const {
  std::vector<std::string> rows;
  const int devices = schedule_.device_count();
  if (devices == static_cast<int>(cells_.size())) {
    for (size_t s = 0; s < cells_.size(); ++s)
      rows.push_back("stage " + std::to_string(s) + " (" + stage_devices_[s].str() + ")");
    tracer_.write(path, rows);
    tracer_.write_svg(svg_path_for(path), rows);
    return;
  }
  // Cells sharing devices: a row per device, each event named with its cell.
  for (int d = 0; d < devices; ++d) {
    std::string cells;
    for (size_t s = 0; s < cells_.size(); ++s)
      if (schedule_.device_of(static_cast<int>(s)) == d)
        cells += (cells.empty() ? "" : ",") + std::to_string(s);
    const Device dev = opt_.devices.size() == 1 ? opt_.devices[0] : opt_.devices[d];
    rows.push_back(detail::concat(dev.str(), " (cells ", cells, ")"));
  }
  Tracer by_device;
  for (TraceEvent e : tracer_.events()) {
    if (e.row >= 0 && e.row < static_cast<int>(cells_.size())) {
      e.name += " cell " + std::to_string(e.row);
      e.row = schedule_.device_of(e.row);
    }
    by_device.add(std::move(e));
  }
  by_device.write(path, rows);
  by_device.write_svg(svg_path_for(path), rows);
}

std::string svg_path_for(const std::string& trace_path) {
  const std::string json = ".json";
  if (trace_path.size() > json.size() &&
      trace_path.compare(trace_path.size() - json.size(), json.size(), json) == 0)
    return trace_path.substr(0, trace_path.size() - json.size()) + ".svg";
  return trace_path + ".svg";
}

std::vector<std::pair<std::string, int64_t>> Pipeline::bytes_sent() const {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& r : ranks_)
    for (auto& b : r->bytes_sent()) out.push_back(b);
  return out;
}

}  // namespace gpipe
