// Timeline of a pipeline run in Chrome trace event format (open the JSON in
// Perfetto or chrome://tracing): one row per device, one complete event
// ("ph":"X") per forward, recompute, backward, transfer and optimizer step.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

namespace gpipe {

struct TraceEvent {
  std::string name;      // e.g. "F3", "B3", "send F3"
  std::string category;  // forward | recompute | backward | transfer | reduce | optimizer
  int row = 0;           // device / stage index
  double start_us = 0, duration_us = 0;
  int micro_batch = -1;
  int step = 0;
};

class Tracer {
 public:
  Tracer();
  double now_us() const;
  void add(TraceEvent e);
  std::vector<TraceEvent> events() const;
  void clear();
  // Writes all events as Chrome trace JSON with `row_names` as thread names.
  void write(const std::string& path, const std::vector<std::string>& row_names) const;
  // Writes all events as an SVG picture of the timeline (timeline_svg, in ms).
  void write_svg(const std::string& path, const std::vector<std::string>& row_names) const;

 private:
  std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mu_;
  std::vector<TraceEvent> events_;
};

// A picture of a timeline, like the paper's Figure 2c: one row per device
// (`row_names`), one box per event (colour by category: forward, recompute,
// backward, backward-input, backward-weight, transfer, reduce, optimizer),
// the micro-batch number on each box wide enough for it, and a time axis in
// `unit` ("ms": events in microseconds shown as ms; anything else: as is).
// A self-contained SVG document.
std::string timeline_svg(const std::vector<TraceEvent>& events,
                         const std::vector<std::string>& row_names, const std::string& unit);

}  // namespace gpipe
