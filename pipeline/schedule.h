// Schedules are whole programs: for each of the K stages (cells), the
// ordered list of every action its device runs in one step — compute,
// communication, loss and the gradient reductions before the synchronous
// update. The executor (pipeline/executor.h) only follows the lists; the
// dry run, the trace, gpipe_train --print-schedule and the tests read the
// same lists, and a user can load one from text (--schedule=file:PATH).
//
// Actions, as written in text (m = micro-batch index):
//   <Fm  receive micro-batch m's activations from the previous stage
//   Fm   forward (keeps its graph unless an Rm follows on this stage)
//   >Fm  send its activations to the next stage
//   Lm   the loss of micro-batch m (last stage)
//   Rm   recompute the forward with its graph (rematerialisation)
//   <Bm  receive the gradients of its outputs from the next stage
//   Bm   backward (input and weight gradients)
//   Im   backward, input gradients only;  Wm  backward, weight gradients only
//   >Bm  send the gradients of its inputs to the previous stage
//   <Tt  wait for turn t of its device (interleaved programs: the cells of
//        one device take turns; t counts the device's hand-overs from 0)
//   >Tt  hand its device over (turn t) to the cell that waits for it
//   reduce_replicas  sum gradients and BatchNorm statistics over replicas
//   reduce_tied      over all ranks: the step's loss totals and the
//                    gradients of weights tied across cells
// The text form is one line per stage, "0: <actions...>", after a header
// "schedule K=2 M=4 train" (or "forward" for evaluation programs; K counts
// cells); a header ending in "devices=D" puts cell c on device c mod D
// (interleaved), "devices=0,1,1,0" gives each cell's device (ZB-V's V),
// otherwise every cell has its own device; '#' starts a comment.
//
// Built-in programs:
//  - GPipe (fill-drain): every stage runs F0..F(M-1), then B(M-1)..B0.
//  - 1F1B: stage k runs min(K-1-k, M) warm-up forwards, then alternates one
//    forward and one backward, then drains the remaining backwards; at most
//    K-k micro-batches are alive on stage k instead of M. Same gradients.
//  - ZB-H1 (Zero Bubble, Qi et al. 2024): the backward split into I and W;
//    the 1F1B order with each stage's weight-gradients deferred into the
//    bubbles of its tail (Note [ZB-H1] in schedule.cc). Stage 0 holds K
//    micro-batches as in 1F1B; every stage may hold up to K.
//  - ZB-H1 within 1F1B's memory (zb-h1-lowmem): the same construction with
//    every stage s keeping at most K - s micro-batches alive, as 1F1B does;
//    two thirds of 1F1B's bubble instead of a third.
//  - interleaved 1F1B (Narayanan et al. 2021): D devices hold v cells each
//    (cell c on device c mod D, K = v D cells); each device runs its cells'
//    forwards and backwards in Megatron-LM's order (micro-batches in groups
//    of D, the first group taking the M mod D left over; warm-up
//    2 (D - 1 - d) + (v - 1) x the first group, also at M = D), the cells of
//    a device handing it over with <T/>T. Any M >= 1 (Note [Interleaved
//    order] in schedule_orders.cc).
//  - ZB-V (Zero Bubble, Qi et al. 2024): 2 K cells in a V, cell c on device
//    c for c < K and 2K - 1 - c after (device 0 holds the first cell and
//    the last), the split backward, each device's order from the
//    cost-aware order builder (OrderCosts: per-cell F, I, W and the link
//    latency it is built for) with at most 2K cell-micro-batches alive per
//    device (1F1B's peak on its first stage, on every device).
//  - V-Half and V-Min (Qi et al. 2024, "controllable memory"): the V with
//    the split backward, each micro-batch's chain first: V-Half holds at
//    most K + 2 cell-micro-batches per device (about K/2 whole
//    micro-batches); V-Min admits one micro-batch per device-time of work
//    and holds about K/3 whole ones, for a longer tail.
//  - zb-interleaved (looped zero bubble): interleaved cells (v per device)
//    with the split backward and at most v K cell-micro-batches alive per
//    device; the shorter, for the given costs, of the order builder's order
//    and the published interleaved zero-bubble pattern (Qi et al. 2024, as
//    PyTorch generates it): 3vM + K - 1 cell-forwards on free links for M a
//    multiple of K.
//  - looped BFS: interleaved cells (v per device), GPipe's order on each
//    device: every micro-batch's forward through one cell before the
//    device's next cell, then the backwards in reverse; the fewest device
//    hand-overs (2 (v - 1) per device), GPipe's memory (v M per device).
//    v = 1 is GPipe. Note [Looped BFS] in schedule_orders.cc.
//  - DualPipeV (DeepSeek-V3, 2024): the V, each device pairing a forward of
//    one cell with a backward of the other in its steady state, both ends of
//    the V at once; M >= 2K. The pairs run one after the other here (one
//    action at a time per device): DualPipeV's order, not its overlap.
//    Notes [V schedules], [DualPipeV] in schedule.cc.
//  - forward-only: every stage runs F0..F(M-1) (evaluation and prediction).
#pragma once

#include <string>
#include <vector>

#include "core/error.h"
#include "pipeline/remat.h"

namespace gpipe {

enum class ActionKind {
  kRecvActivations,  // <F
  kForward,          // F
  kSendActivations,  // >F
  kLoss,             // L
  kRecompute,        // R
  kRecvGradients,    // <B
  kBackward,         // B
  kBackwardInput,    // I
  kBackwardWeight,   // W
  kSendGradients,    // >B
  kReduceReplicas,   // reduce_replicas
  kReduceTied,       // reduce_tied
  kRecvTurn,         // <T
  kSendTurn,         // >T
};

struct Action {
  ActionKind kind;
  int micro_batch = -1;  // -1 for the reductions; the turn number for <T and >T
  bool operator==(const Action&) const = default;
};

struct Schedule {
  int M = 0;             // micro-batches
  bool training = true;  // false: a forward-only program (evaluation, prediction)
  std::vector<std::vector<Action>> stages;  // [stage] -> actions in order
  // The device of each cell when cells share devices (interleaved: c mod D;
  // ZB-V: the V shape); empty: cell c has device c to itself.
  std::vector<int> device_map;
  int cells() const { return static_cast<int>(stages.size()); }
  int device_count() const;
  int device_of(int cell) const { return device_map.empty() ? cell : device_map[cell]; }
  bool operator==(const Schedule&) const = default;
};

enum class ScheduleKind {
  kGPipe,
  k1F1B,
  kZBH1,
  kZBH1LowMem,
  kInterleaved,
  kZBV,
  kZBInterleaved,
  kVHalf,
  kVMin,
  kDualPipeV,
  kLoopedBFS,
};
// "gpipe" | "1f1b" | "zb-h1" | "zb-h1-lowmem" | "interleaved" | "zb-v" | "zb-interleaved" |
// "v-half" | "v-min" | "dualpipev" | "looped-bfs"
ScheduleKind parse_schedule(const std::string& name);
std::string schedule_name(ScheduleKind kind);
// Every built-in kind, in the order above (the planner's and the bench's list).
std::vector<ScheduleKind> all_schedules();
// The V schedules hold exactly 2 cells on each device (zb-v, v-half, v-min,
// dualpipev); the interleaved ones (interleaved, zb-interleaved, looped-bfs) take v >= 1
// cells per device; the others one.
bool v_shaped(ScheduleKind kind);
bool interleaved_kind(ScheduleKind kind);
// Whether make_schedule places the kind's order for its OrderCosts (a hop's
// latency included): zb-v, v-half, v-min, and zb-interleaved with v > 1.
bool cost_built(ScheduleKind kind, int v);
// Cells per device the kind runs with when asked for v: 2 for a V, v for
// the interleaved kinds, 1 otherwise.
int cells_per_device(ScheduleKind kind, int v);

// The costs a cost-built order is placed for (ZB-V, zb-interleaved, V-Half,
// V-Min; Note [Order builder] in schedule_build.cc), per cell and in any one
// unit: a forward, an input-gradient, a weight-gradient (a whole backward is
// their sum), and the latency of one hop between two devices (a hop between
// two cells of one device is free). The default: equal costs and a hop of
// half a forward (a real link is never free; the order built for it loses
// nothing on free links at M >= 2K, see schedule_test).
struct OrderCosts {
  double forward = 1, backward_input = 1, backward_weight = 1;
  double link_latency = 0;
};

// The idle share of each device the schedule's paper gives for equal
// per-stage costs (F, B = I + W), free links and no reductions, with its
// text, for K devices: (K-1)/(M+K-1) for GPipe and 1F1B; (K-1)/(3M+K-1)
// for ZB-H1 with F = I = W (exact for M >= K; fewer micro-batches leave
// more idle); 2(K-1)/(3M+2(K-1)) for ZB-H1 within 1F1B's memory; (K-1)/(vM+K-1) for interleaved
// 1F1B with v cells per device; (K-1)/(6M+K-1) for ZB-V and DualPipeV with F = I = W per
// cell; (K-1)/(3vM+K-1) for zb-interleaved (exact for M a multiple of K; for other M >= K
// its order took up to 5 ticks more for K <= 8, M <= 32; fewer micro-batches leave more idle);
// for looped BFS (K-1)/(vM+K-1) for M >= K, (vK-1-(v-1)M)/(vK+M-1) below (Note [Looped
// BFS]); for V-Min (4K-5)/(6M+4K-5) and V-Half (7K-10)/(12M+7K-10), fitted to the
// builder's makespans (Note [V schedules]).
struct BubbleFormula {
  double value;
  std::string text;
};
BubbleFormula bubble_formula(ScheduleKind kind, int k, int m, int v = 1);

// The training program for K stages and M micro-batches under `remat`.
// Interleaved: K is the number of devices and the program has v K cells.
Schedule make_schedule(ScheduleKind kind, int k, int m, RematMode remat = RematMode::kNever,
                       int v = 1, const OrderCosts& costs = {});
// The forward-only program; with_loss adds Lm on the last stage (evaluation).
Schedule make_forward_schedule(int k, int m, bool with_loss);

// Text form (see the header comment). to_string of one stage's list or one action.
std::string to_string(const Action& a);
std::string to_string(const std::vector<Action>& actions);
std::string to_text(const Schedule& s);
// Parses to_text's form; `source` names the text in errors ("file x.txt").
// Throws ScheduleError for malformed text (line and token named). Does not validate.
Schedule parse_schedule_text(const std::string& text, const std::string& source = "schedule");
// Reads and parses a file; throws gpipe::Error naming the path when unreadable.
Schedule load_schedule_file(const std::string& path);

// A schedule that cannot run. what() holds the reason, the device x time
// grid and the first offending action marked [like this].
class ScheduleError : public Error {
 public:
  using Error::Error;
};

// The dry run: every action runs on a clock. Compute actions (F, R, B, I, W)
// take one tick; the others take none. A receive waits for its send, and
// reduce_tied for every stage to reach it (it is a collective);
// reduce_replicas is between copies of the same stage and never waits here.
struct DryRun {
  std::vector<std::vector<int>> ticks;  // [stage][action index] -> start tick
  std::vector<int>
      peak_live;     // per stage: most micro-batches forwarded and not yet fully backwarded
  int makespan = 0;  // ticks until the last action ends
};
// Checks that `s` is a complete program for K stages and M micro-batches
// and runs it on the clock. Refuses (ScheduleError) a list where a
// micro-batch is not forwarded, or (training) not backwarded, exactly once
// per stage; an action before what it needs on its own stage (B before F, R
// or L out of place, W before I, a send before its compute); a receive
// without its send, or communication off the pipeline's ends; reductions
// missing, repeated or before a backward; a deadlock.
DryRun validate(const Schedule& s, int k, int m);

}  // namespace gpipe
