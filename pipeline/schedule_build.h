// Internal to //pipeline:schedule: the pieces the built-in programs are
// made of. A program is built in two passes: first each device's order of
// compute (which cell runs which forward or backward when), then each
// compute task is expanded with its communication, the loss, the
// recomputation the remat policy asks for and the device turns
// (from_device_orders). The orders come from fixed patterns (GPipe, 1F1B,
// Megatron-LM's interleaving, looped BFS, the published zero-bubble ones)
// or from the cost-aware clock of build_orders (Note [Order builder] in
// schedule_build.cc).
#pragma once

#include <vector>

#include "pipeline/schedule.h"

namespace gpipe::build {

// One compute task: a forward, a whole backward, or its input or weight half.
enum class Task { kF, kB, kI, kW };
struct Compute {
  Task task;
  int micro_batch;
};
// A compute task of one cell on the device that runs it.
struct DeviceTask {
  int cell;
  Compute compute;
};

// Appends one compute task of `cell` (of `cells`) with its communication,
// loss and recomputation; `previous` is the cell's compute task before it.
void add_compute(std::vector<Action>& out, int cell, int cells, const Compute& c,
                 const Compute* previous, RematMode remat);
void add_forward(std::vector<Action>& out, int cell, int cells, int mb, bool with_loss);
void add_reductions(Schedule& s);

// A program from each device's order of its cells' compute: the cells'
// actions with communication and remat, a turn (>T, <T) at every change of
// cell on a device, then the reductions. device_map empty: cell c on device c.
Schedule from_device_orders(int m, RematMode remat, int cells, std::vector<int> device_map,
                            const std::vector<std::vector<DeviceTask>>& orders);

// What build_orders places (Note [Order builder]).
struct OrderSpec {
  int m = 1;                          // micro-batches
  std::vector<int> device_of;         // cell -> device; the cells form one chain 0 .. C-1
  bool split = true;                  // the backward as I and W (else one B = I + W)
  OrderCosts costs;                   // per cell; latency per hop between two devices
  std::vector<int> cap;               // per device: most cell-micro-batches alive (reserved)
  bool input_before_forward = false;  // priority: I (or B) before F when both are ready
  bool forward_deeper_first = true;   // among the device's cells, the deeper forward first
  // The cap counts what admitted micro-batches will bring (never stuck), or only what is
  // alive, at every forward (tighter packing, but the build can get stuck: `complete` says).
  bool reserve = true;
  int admit_room = 1;  // without `reserve`: a micro-batch is admitted while alive + this <= cap
  // Admissions and weight-gradients wait rather than delay chain work (a held micro-batch's
  // forward, an input-gradient) due before they would end.
  bool protect_chain = false;
  // Micro-batch j enters the first cell no earlier than max(0, j - admit_burst) admit_period.
  double admit_period = 0;
  int admit_burst = 0;
};
struct BuiltOrders {
  std::vector<std::vector<DeviceTask>> orders;  // per device
  double makespan = 0;                          // on the spec's clock
  std::vector<int> peak_alive;                  // per device: most cell-micro-batches alive at once
  bool complete = false;  // false: stuck (only without `reserve`); orders then empty
};
BuiltOrders build_orders(const OrderSpec& spec);

// `orders` replayed on the builder's clock, idle time filled by pending
// weight-gradients or not (Note [Weight-gradient fill]); `m` micro-batches,
// the cells' devices in `device_of`.
enum class Fill { kNone, kFitting, kAny };
BuiltOrders replay_orders(const std::vector<std::vector<DeviceTask>>& orders,
                          const std::vector<int>& device_of, int m, const OrderCosts& c, Fill fill);

// The fixed orders (schedule_orders.cc). Each device's order of: the interleaved 1F1B
// programs (Note [Interleaved order]); looped BFS, whole backwards (Note [Looped BFS]); the
// published interleaved zero-bubble pattern, split backwards (Note [Published interleaved
// zero bubble]); all three with cell c on device c mod K, v cells per device.
std::vector<std::vector<DeviceTask>> interleaved_orders(int k, int v, int m);
std::vector<std::vector<DeviceTask>> looped_bfs_orders(int k, int v, int m);
std::vector<std::vector<DeviceTask>> published_zb_interleaved_orders(int k, int v, int m);

// Each device's order of the published ZB-V pattern on the V map (Note [Published ZB-V]).
std::vector<std::vector<DeviceTask>> published_zbv_orders(int k, int m);

// The V map of 2K cells on K devices: cell c on device c, then back (2K - 1 - c).
std::vector<int> v_device_map(int k);

}  // namespace gpipe::build
