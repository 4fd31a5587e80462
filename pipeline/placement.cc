// Placement: where each cell's parameters live (Note [Tied copies]), and
// the ranks, workers and links a Pipeline builds for its cells.
#include "pipeline/placement.h"

#include <map>
#include <thread>
#include <unordered_map>

#include "pipeline/pipeline.h"

namespace gpipe {

std::vector<std::vector<TiedWeight>> place_cells(const LayerList& layers,
                                                 const Partition& partition,
                                                 const std::vector<int>& local,
                                                 const std::vector<Device>& devices) {
  const int k = static_cast<int>(partition.cells());
  std::unordered_map<TensorImpl*, std::vector<int>> stages_of;
  std::vector<TensorImpl*> order;  // first appearance
  // The originals stay alive until every cell is placed: the keys above are
  // their addresses, and once the last slot holding a tensor is replaced by
  // its device copy (a model built on the CPU, cells on a GPU) a freed
  // address could be reused by a new tensor and mistaken for it.
  std::vector<Tensor> originals;
  std::vector<std::vector<std::pair<TensorImpl*, Tensor*>>> slots(k);
  for (int s = 0; s < k; ++s)
    for (int64_t i = partition.begin(s); i < partition.end(s); ++i)
      for (auto& p : layers[i]->parameters()) {
        TensorImpl* impl = p.tensor->impl_ptr().get();
        auto& st = stages_of[impl];
        if (st.empty()) {
          order.push_back(impl);
          originals.push_back(*p.tensor);
        }
        if (st.empty() || st.back() != s) st.push_back(s);
        slots[s].push_back({impl, p.tensor});
      }
  std::vector<std::vector<TiedWeight>> ties;
  for (int s : local) {
    const Device dev = devices[s];
    std::unordered_map<TensorImpl*, Tensor> placed;  // this cell's tensor for each original
    std::unordered_map<TensorImpl*, Tensor*> copy;   // this cell's slot of each tied tensor
    for (auto& [impl, slot] : slots[s]) {
      auto it = placed.find(impl);
      if (it == placed.end()) {
        const bool tied = stages_of[impl].size() > 1;
        Tensor t = *slot;
        if (t.device() != dev || (tied && stages_of[impl].front() != s)) {
          MemoryCategoryGuard cat(MemoryCategory::kParameter);
          NoGradGuard no_grad;
          t = t.device() != dev ? slot->to(dev).detach() : slot->clone();
          t.set_requires_grad(slot->requires_grad());
        }
        it = placed.emplace(impl, t).first;
        if (tied) copy[impl] = slot;
      }
      *slot = it->second;
    }
    for (int64_t i = partition.begin(s); i < partition.end(s); ++i) layers[i]->to(dev);
    std::vector<TiedWeight> mine;
    for (TensorImpl* impl : order)
      if (stages_of[impl].size() > 1)
        mine.push_back({impl->shape.numel(), impl->dtype, stages_of[impl],
                        copy.count(impl) ? copy[impl] : nullptr});
    ties.push_back(std::move(mine));
  }
  return ties;
}

// Note [Device turns]: for each turn number in cell c's list, the cell it
// takes the turn from (<T) or hands it to (>T): the other end of the same
// number on the same device.
std::map<int, int> turn_peers(const Schedule& s, int c) {
  std::map<int, int> from, to;  // turn -> sender / receiver, on c's device
  for (int o = 0; o < s.cells(); ++o) {
    if (s.device_of(o) != s.device_of(c)) continue;
    for (const Action& a : s.stages[o]) {
      if (a.kind == ActionKind::kSendTurn) from[a.micro_batch] = o;
      if (a.kind == ActionKind::kRecvTurn) to[a.micro_batch] = o;
    }
  }
  std::map<int, int> peers;
  for (const Action& a : s.stages[c]) {
    if (a.kind == ActionKind::kRecvTurn) peers[a.micro_batch] = from.at(a.micro_batch);
    if (a.kind == ActionKind::kSendTurn) peers[a.micro_batch] = to.at(a.micro_batch);
  }
  return peers;
}

// Note [Tied copies]: a parameter used by several cells (tied weights) gets
// its own copy in every cell after the first, even on a shared device, so
// no two ranks ever accumulate into one tensor; reduce_tied sums their
// gradients. Every rank sees the whole model here (in a multi-process job
// each builds it, with the same seed), so all agree on the tied list.
void Pipeline::build_ranks() {
  const int k = static_cast<int>(partition_.cells());
  tied_names_ = tied_parameter_names(model_.layers);
  std::vector<int> local;
  if (opt_.world)
    local = {info_.stage};
  else
    for (int s = 0; s < k; ++s) local.push_back(s);

  std::vector<std::vector<TiedWeight>> ties =
      place_cells(model_.layers, partition_, local, stage_devices_);
  // Which cells each skip connects, from the whole model's list (Note [Skips]).
  std::vector<int> cell_of_layer(model_.layers.size());
  for (int s = 0; s < k; ++s)
    for (int64_t i = partition_.begin(s); i < partition_.end(s); ++i)
      cell_of_layer[static_cast<size_t>(i)] = s;
  skip_routes_ =
      gpipe::skip_routes(skip_edges(model_.layers), cell_of_layer, k, opt_.skip_transport);
  std::vector<std::unique_ptr<Stage>> stages;
  for (int s : local) {
    const Device dev = stage_devices_[s];
    LayerList cell(model_.layers.begin() + partition_.begin(s),
                   model_.layers.begin() + partition_.end(s));
    stages.push_back(std::make_unique<Stage>(s, std::move(cell), partition_.begin(s), dev,
                                             s == k - 1 ? model_.loss : nullptr,
                                             skip_routes_[static_cast<size_t>(s)]));
  }
  if (opt_.world) {
    // Only this rank's cell stays; the other layers (and their weights) go.
    model_.layers = stages.front()->layers();
    if (info_.stage != k - 1) model_.loss.reset();
  }

  // Cores: split between this process's ranks and the other processes on this host.
  const int per_host = opt_.world ? opt_.world->local_size() : 1;
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / per_host);
  const int n = static_cast<int>(local.size());
  // The cells of one device take turns (Note [Device turns]): cores per device.
  const int v = opt_.virtual_stages;
  const int busy = opt_.world ? n : std::max(1, n / v);
  const int host_cores = opt_.world
                             ? std::max(1, static_cast<int>(std::thread::hardware_concurrency()) /
                                               std::max(1, per_host / v))
                             : cores;
  for (int s : local) {
    const int threads =
        opt_.threads_per_stage > 0 ? opt_.threads_per_stage : std::max(1, host_cores / busy);
    workers_.push_back(std::make_unique<DeviceWorker>(stage_devices_[s], threads));
  }
  const double watchdog =
      opt_.watchdog_seconds > 0 ? opt_.watchdog_seconds : opt_.timeout_seconds / 2;
  // The gradient sums between processes may block without a deadline of
  // their own (Note [Large all-reduces]); twice the timeout there means a
  // rank is stuck: the job ends. (Local collectives always have a deadline.)
  std::shared_ptr<Communicator> world = opt_.world;
  watchdog_ = std::make_unique<Watchdog>(
      who_, watchdog, n, world ? 2 * opt_.timeout_seconds : 0,
      world ? std::function<void()>([world] { world->abort(1); }) : nullptr);
  if (!opt_.world) group_ = std::make_unique<LocalGroup>(k);
  control_ = opt_.world ? opt_.world : group_->rank(0);
  failures_ = std::make_unique<FailureLog>([this] {
    // While the ranks connect, another thread may still be making its
    // links: only the collectives are woken then.
    if (links_ready_)
      for (auto& r : ranks_) r->abort_links();
    control_->cancel();
  });
  for (int i = 0; i < n; ++i) {
    ExecutorOptions eo;
    eo.row = i;
    eo.info = opt_.world ? info_ : rank_info_for(local[i], k, 1, opt_.layout);
    eo.layout = opt_.layout;
    eo.timeout_seconds = opt_.timeout_seconds;
    eo.sync_batchnorm = opt_.sync_batchnorm;
    eo.tracer = &tracer_;
    eo.watchdog = watchdog_.get();
    eo.failures = failures_.get();
    eo.fault_hook = &opt_.fault_hook;
    eo.link_delay_seconds = opt_.link_delay_seconds;
    for (int o = 0; o < k; ++o)
      if (o != local[i] && schedule_.device_of(o) == schedule_.device_of(local[i]))
        eo.device_peers.push_back(o);
    if (!eo.device_peers.empty()) eo.turn_peer = turn_peers(schedule_, local[i]);
    ranks_.push_back(std::make_unique<StageExecutor>(eo, std::move(stages[i]), std::move(ties[i])));
  }
  try {
    on_ranks(
        [&](StageExecutor& r) {
          r.connect(opt_.world ? opt_.world : group_->rank(r.info().stage));
        },
        "the connection of its links");
  } catch (const std::exception&) {
    if (!failures_->any()) throw;
    throw Error(failure_message("pipeline setup"));
  }
  links_ready_ = true;
}

Pipeline::~Pipeline() {
  // Executors (and their links) before the communicators' owners.
  ranks_.clear();
  workers_.clear();
  group_.reset();
}

}  // namespace gpipe
