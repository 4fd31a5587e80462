// The hop latency between two devices, measured when a Pipeline is built
// (PipelineOptions::measure_link_latency; Note [Measured link latency] in
// pipeline/link_latency.cc), and the order latency it gives the cost-built
// orders (zb-v, zb-interleaved, v-half, v-min), in forwards of a cell.
//
//   Pipeline pipe(model, {.K = 2, .M = 8, .schedule = ScheduleKind::kZBV,
//                         .measure_link_latency = true}, sample);
//   pipe.measured_link()->order_latency;  // e.g. 0.25: the order was built for a quarter forward
#pragma once

#include <string>

namespace gpipe {

struct MeasuredLink {
  double hop_seconds = 0;  // the median round trip of a small message between cells 0 and 1, / 2
  int round_trips = 0;
  std::string kind;             // the link's transport: "local", "mpi", "nccl"
  double forward_seconds = 0;   // a cell's forward (0: not timed; the order does not use it)
  double forwards = 0;          // hop_seconds / forward_seconds
  double order_latency = 0;     // forwards on the grid: what the order is built for
  bool cost_built = false;      // the schedule's order depends on it
  double predicted_bubble = 0;  // the program's idle share at order_latency (F = I = W = 1)
};

// `forwards` rounded to a quarter; below an eighth 0 (free links); at most
// 8. A resumed run measures again: the grid makes it find the same order
// unless the figure moved across a step of it.
double order_latency_on_grid(double forwards);

// "link latency measured 12.3 us (local, median of 32 round trips / 2) =
// 0.04 forwards of a cell (F 0.31 ms); order built for 0 (free links), ...".
std::string describe(const MeasuredLink& link, const std::string& schedule);

}  // namespace gpipe
