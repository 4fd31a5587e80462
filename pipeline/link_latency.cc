// Note [Measured link latency]: a cost-built order (zb-v, zb-interleaved,
// v-half, v-min) is placed for a hop's latency in forwards of a cell; on a
// slow link the order built for free links loses 25-45% (K = 8, M = 32,
// ZB-V: 268 against 215.5 cell-forwards at half a forward). With
// measure_link_latency the Pipeline finds the figure itself, once its ranks
// are connected and before any step:
//  - the hop: stage 0 sends a 4-byte tensor to stage 1 over its activations
//    link and stage 1 sends it back over its gradients link, the links and
//    threads every step uses (in one process the stages' workers and their
//    mailboxes; under mpirun the MPI transport, its progress threads
//    included); the median of up to 32 round trips (20 ms at most), / 2;
//  - a cell's forward: stage 0 runs its cell's forward on the sample's
//    first micro-batch without a graph (best of two, one when the hop is
//    clearly negligible), scaled by the mean cell's cost over cell 0's (the
//    partitioner's estimate: cells are cut to equal cost, cell 0 may still
//    hold less, as an embedding);
//  - the ratio is rounded to a quarter forward, and below an eighth to 0,
//    so a fast link keeps the free-link order bit for bit and a resumed run
//    finds the same order unless the link moved across a step of the grid.
// Under mpirun rank 0 (stage 0 of replica 0) measures and broadcasts its
// figures, so every rank builds the same program. The program is rebuilt
// with the figure when it differs from order_costs.link_latency; cells per
// device and devices stay, so only the device turns' peers change.
#include "pipeline/link_latency.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>

#include "pipeline/microbatch.h"
#include "pipeline/pipeline.h"
#include "pipeline/placement.h"
#include "pipeline/simulate.h"

namespace gpipe {
namespace {

constexpr int kRoundTrips = 32;
constexpr double kProbeBudgetSeconds = 0.02;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Seconds of stage 0's forward of `inputs` (one micro-batch), without a
// graph; `hop` and `scale` decide whether a second run is worth it.
double time_cell_forward(StageExecutor& r, const Bundle& inputs, double hop, double scale,
                         Precision precision) {
  Stage& stage = r.stage();
  StageMessage in;
  {
    NoGradGuard no_grad;
    for (const Tensor& t : inputs)
      in.main.tensors.push_back(t.defined() ? t.to(stage.device()).detach() : t);
  }
  in.main.requires_grad.assign(in.main.tensors.size(), false);
  StepContext ctx;
  ctx.precision = precision;
  double best = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep < 2; ++rep) {
    NoGradGuard no_grad;
    const auto t0 = std::chrono::steady_clock::now();
    StageMessage out = stage.forward(0, in, /*keep_graph=*/false, ctx, nullptr);
    for (const Tensor& t : out.main.tensors)  // a GPU's queued work counts
      if (t.defined() && !t.device().is_cpu()) (void)t.to(kCpu);
    best = std::min(best, seconds_since(t0));
    stage.clear();
    if (hop / (best * scale) < 1.0 / 16) break;  // 0 on the grid however fast the next run
  }
  for (const auto& layer : stage.layers()) layer->discard_step();
  return best;
}

}  // namespace

double order_latency_on_grid(double forwards) {
  if (!(forwards >= 0.125)) return 0;
  return std::min(8.0, std::round(forwards * 4) / 4);
}

std::string describe(const MeasuredLink& link, const std::string& schedule) {
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "link latency measured %.1f us (%s, median of %d round trips / 2)",
                link.hop_seconds * 1e6, link.kind.c_str(), link.round_trips);
  std::string out = buf;
  if (!link.cost_built) return out + "; the order of " + schedule + " does not depend on it";
  if (link.forward_seconds <= 0) return out + "; no forward timed: order as given";
  std::snprintf(buf, sizeof(buf),
                " = %.3g forwards of a cell (F %.3g ms); orders built for %g%s, predicted bubble "
                "%.3f",
                link.forwards, link.forward_seconds * 1e3, link.order_latency,
                link.order_latency == 0 ? " (free links)" : "", link.predicted_bubble);
  return out + buf;
}

double StageExecutor::probe_link(int round_trips, double budget_seconds, int* done) {
  const int s = opt_.info.stage;
  GPIPE_CHECK((s == 0 && act_out_ && grad_in_) || (s == 1 && act_in_ && grad_out_),
              "probe_link: stage ", s, " has no link to probe");
  const auto timeout = std::chrono::duration<double>(opt_.timeout_seconds);
  const Device dev = stage_->device();
  auto message = [&](float last) {
    Message m;
    m.tensors.push_back(Tensor::full({1}, last, DType::kFloat32, dev));
    m.requires_grad.push_back(false);
    return m;
  };
  if (s == 1) {  // answers until the message marked last
    for (int i = 0;; ++i) {
      Message in = act_in_->receive(i, timeout);
      grad_out_->send(i, message(0));
      if (in.tensors.at(0).to(kCpu).item() != 0) break;
    }
    if (done) *done = 0;
    return 0;
  }
  std::vector<double> trips;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < round_trips; ++i) {
    const bool last =
        i + 1 == round_trips || (i >= 2 && seconds_since(start) + trips.back() >= budget_seconds);
    const auto t0 = std::chrono::steady_clock::now();
    act_out_->send(i, message(last ? 1 : 0));
    (void)grad_in_->receive(i, timeout);
    trips.push_back(seconds_since(t0));
    if (last) break;
  }
  if (done) *done = static_cast<int>(trips.size());
  std::nth_element(trips.begin(), trips.begin() + trips.size() / 2, trips.end());
  return trips[trips.size() / 2] / 2;
}

void Pipeline::build_order_for_link(const Batch& sample) {
  const int cells = static_cast<int>(partition_.cells());
  if (!opt_.measure_link_latency || opt_.custom_schedule || cells < 2 ||
      schedule_.device_of(0) == schedule_.device_of(1))
    return;
  MeasuredLink link;
  link.cost_built = cost_built(opt_.schedule, opt_.virtual_stages);
  const double mean_cost =
      std::accumulate(partition_.cell_costs.begin(), partition_.cell_costs.end(), 0.0) / cells;
  const double scale = opt_.balance_by != BalanceBy::kMemory && partition_.cell_costs[0] > 0
                           ? mean_cost / partition_.cell_costs[0]
                           : 1.0;
  on_ranks(
      [&](StageExecutor& r) {
        if (r.info().replica != 0 || r.info().stage > 1) return;
        int trips = 0;
        const double hop = r.probe_link(kRoundTrips, kProbeBudgetSeconds, &trips);
        if (r.info().stage != 0) return;
        link.hop_seconds = hop;
        link.round_trips = trips;
        link.kind = r.link_kind();
        if (link.cost_built && !sample.inputs.empty()) {
          const std::vector<Batch> micro =
              split_micro_batches(Batch{sample.inputs, {}},
                                  std::min<int64_t>(opt_.M, batch_size(Batch{sample.inputs, {}})));
          link.forward_seconds =
              scale * time_cell_forward(r, micro[0].inputs, hop, scale, opt_.precision);
        }
      },
      "the measurement of its link's latency");
  if (opt_.world) {  // rank 0's figures on every rank
    double figures[3] = {link.hop_seconds, link.forward_seconds,
                         static_cast<double>(link.round_trips)};
    std::string bytes(reinterpret_cast<const char*>(figures), sizeof(figures));
    bytes += link.kind;
    opt_.world->broadcast(bytes, 0, "sharing the measured link latency");
    std::memcpy(figures, bytes.data(), sizeof(figures));
    link.hop_seconds = figures[0];
    link.forward_seconds = figures[1];
    link.round_trips = static_cast<int>(figures[2]);
    link.kind = bytes.substr(sizeof(figures));
  }
  if (link.forward_seconds > 0) {
    link.forwards = link.hop_seconds / link.forward_seconds;
    link.order_latency = order_latency_on_grid(link.forwards);
  }
  if (link.cost_built && link.forward_seconds > 0 &&
      link.order_latency != opt_.order_costs.link_latency) {
    opt_.order_costs.link_latency = link.order_latency;
    schedule_ = make_schedule(opt_.schedule, opt_.K, opt_.M, opt_.remat, opt_.virtual_stages,
                              opt_.order_costs);
    dry_run_ = validate(schedule_, cells, opt_.M);
    for (auto& r : ranks_) r->set_turn_peers(turn_peers(schedule_, r->info().stage));
  }
  if (link.cost_built) {
    CostModel costs = CostModel::uniform(cells, 1.0, 2.0);
    costs.links.resize(static_cast<size_t>(cells - 1));
    for (int c = 0; c + 1 < cells; ++c)
      costs.links[c].latency_seconds =
          schedule_.device_of(c) == schedule_.device_of(c + 1) ? 0 : opt_.order_costs.link_latency;
    link.predicted_bubble = simulate(schedule_, costs).bubble_fraction;
  }
  measured_link_ = link;
}

}  // namespace gpipe
