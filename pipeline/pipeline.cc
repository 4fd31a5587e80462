// The executor. Each stage has one DeviceWorker thread that walks its task
// list from the schedule; forward tasks wait for the previous stage's
// activations, backward tasks for the next stage's gradients, both through
// keyed Mailboxes. A failure in any task aborts every mailbox, so all other
// workers stop waiting, and the step reports the first real error with its
// stage and micro-batch on the caller's thread (Invariant 5: nothing hangs).
#include "pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/rng.h"
#include "ops/ops.h"

namespace gpipe {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Bundle to_device(const Bundle& b, Device d) {
  NoGradGuard no_grad;
  Bundle out;
  for (const Tensor& t : b) out.push_back(t.defined() ? t.to(d).detach() : t);
  return out;
}

// Forward + backward seconds of each layer on `inputs` (balance_by = time).
std::vector<double> profile_layers(const LayerList& layers, Bundle x) {
  std::vector<double> secs;
  for (const auto& layer : layers) {
    double best = 1e300;
    Bundle next;
    for (int rep = 0; rep < 2; ++rep) {
      Bundle leaves;
      for (const Tensor& t : x) {
        Tensor l = t.detach();
        if (is_floating(l.dtype())) l.set_requires_grad(true);
        leaves.push_back(l);
      }
      const auto t0 = std::chrono::steady_clock::now();
      Bundle out = layer->forward(leaves);
      std::vector<Tensor> roots, grads;
      for (const Tensor& o : out)
        if (o.defined() && o.requires_grad()) {
          roots.push_back(o);
          grads.push_back(Tensor::full(o.shape(), 1e-3, o.dtype(), o.device()));
        }
      if (!roots.empty()) backward(roots, grads);
      best = std::min(best, seconds_since(t0));
      next.clear();
      for (const Tensor& o : out) next.push_back(o.detach());
    }
    for (auto& p : layer->parameters()) p.tensor->zero_grad();
    layer->discard_step();
    secs.push_back(best);
    x = next;
  }
  return secs;
}

std::string task_name(const Task& t) {
  return std::string(t.kind == TaskKind::kForward ? "forward" : "backward") + " of micro-batch " +
         std::to_string(t.micro_batch);
}

// Note [Fault injection]: GPIPE_FAULT="rank=R,step=S,micro=M,kind=K[,at=A]"
// makes world rank R fail in step S (1-based, as the trainer counts): at the
// forward of micro-batch M (at=forward, the default) or before summing its
// gradients with its replicas (at=sync). Kind "throw" raises an error,
// "exit" ends the process with code 3, "kill" sends itself SIGKILL, "hang"
// stops making progress.
// Tests use it to check that the job ends everywhere, in bounded time, with
// the failure named. Unset in normal runs.
void inject_fault(const char* spec, int rank, int64_t step, int m, const char* where) {
  int want_rank = -1, want_micro = 0;
  long want_step = -1;
  char what[16] = "throw", at[16] = "forward";
  for (const char* p = spec; *p;) {
    if (std::sscanf(p, "rank=%d", &want_rank) == 1 || std::sscanf(p, "step=%ld", &want_step) == 1 ||
        std::sscanf(p, "micro=%d", &want_micro) == 1 || std::sscanf(p, "kind=%15[a-z]", what) == 1 ||
        std::sscanf(p, "at=%15[a-z]", at) == 1) {
    }
    const char* comma = std::strchr(p, ',');
    if (!comma) break;
    p = comma + 1;
  }
  if (want_rank != rank || want_step != step + 1 || want_micro != m || std::strcmp(at, where) != 0) return;
  const std::string kind_name = what;
  if (kind_name == "kill") std::raise(SIGKILL);
  if (kind_name == "exit") std::_Exit(3);
  if (kind_name == "hang")
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  throw Error(detail::concat("injected fault (GPIPE_FAULT=", spec, ")"));
}

// One gradient slot of a summed buffer: the tensor whose gradient it is
// (null where this rank holds no copy: it adds zeros), its size and dtype,
// and whether any rank has a gradient for it (slots nobody has are skipped).
struct GradSlot {
  Tensor* tensor;
  int64_t numel;
  DType dtype;
  bool present;
};

// Sums the slots' gradients over `comm`: one flat tensor per dtype on
// `device` (so a device communicator such as NCCL reduces it in place), then
// each held tensor's gradient becomes its slice of the sum (a view: no
// second copy of every gradient).
void allreduce_gradients(Communicator& comm, const std::vector<GradSlot>& slots, Device device, const char* what) {
  NoGradGuard no_grad;
  MemoryCategoryGuard cat(MemoryCategory::kGradient);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    int64_t n = 0;
    for (const GradSlot& s : slots)
      if (s.present && s.dtype == dt) n += s.numel;
    if (n == 0) continue;
    Tensor flat = Tensor::zeros(Shape{n}, dt, device);
    int64_t at = 0;
    for (const GradSlot& s : slots) {
      if (!s.present || s.dtype != dt) continue;
      if (s.tensor && s.tensor->grad().defined())
        ops::narrow(flat, 0, at, s.numel).copy_from(ops::reshape(s.tensor->grad().to(device), {s.numel}));
      at += s.numel;
    }
    comm.allreduce_sum(flat, what);
    at = 0;
    for (const GradSlot& s : slots) {
      if (!s.present || s.dtype != dt) continue;
      if (s.tensor) s.tensor->set_grad(ops::reshape(ops::narrow(flat, 0, at, s.numel), s.tensor->shape().dims()));
      at += s.numel;
    }
  }
}

}  // namespace

BalanceBy parse_balance_by(const std::string& name) {
  if (name == "cost") return BalanceBy::kCost;
  if (name == "time") return BalanceBy::kTime;
  if (name == "memory") return BalanceBy::kMemory;
  throw Error(detail::concat("unknown balance-by '", name, "' (expected cost, time or memory)"));
}

RankLayout parse_rank_layout(const std::string& name) {
  if (name == "pipeline") return RankLayout::kPipelineMajor;
  if (name == "stage") return RankLayout::kStageMajor;
  throw Error(detail::concat("unknown rank layout '", name, "' (expected pipeline or stage)"));
}

RankInfo rank_info_for(int rank, int stages, int replicas, RankLayout layout) {
  RankInfo r;
  r.world_rank = rank;
  r.world_size = stages * replicas;
  r.stages = stages;
  r.replicas = replicas;
  r.stage = layout == RankLayout::kPipelineMajor ? rank % stages : rank / replicas;
  r.replica = layout == RankLayout::kPipelineMajor ? rank / stages : rank % replicas;
  return r;
}

const char* rank_layout_name(RankLayout l) { return l == RankLayout::kPipelineMajor ? "pipeline" : "stage"; }

// Note [Processes]: in a multi-process job every rank builds the whole model
// (same seed, so the same initial weights), partitions it identically, keeps
// only its own cell and drops the other layers. `pipe` holds the K ranks of
// this replica (rank = stage), `replicas` the R ranks running this stage.
struct Pipeline::Dist {
  std::shared_ptr<Communicator> world, pipe, replicas;
  RankInfo info;
  std::string who;  // "rank 3 (stage 1, replica 1)"
};

// Prints, when a step runs longer than its limit, what every local stage is
// doing or waiting for; one report per limit elapsed.
class Pipeline::Watchdog {
 public:
  // `hard_stop`: called when a phase marked blocking (set_blocking) lasts
  // longer than `hard_limit` seconds: a multi-process job ends itself there
  // (Note [Large all-reduces]: those waits have no deadline of their own).
  Watchdog(std::string who, double limit, int rows, double hard_limit = 0, std::function<void()> hard_stop = {})
      : who_(std::move(who)), limit_(limit), hard_limit_(hard_limit), hard_stop_(std::move(hard_stop)),
        state_(rows, "idle") {
    thread_ = std::thread([this] { loop(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void start_step(int64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    step_ = step;
    running_ = true;
    started_ = std::chrono::steady_clock::now();
    reports_ = 0;
  }
  void set_blocking(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    blocking_ = on;
    blocking_since_ = std::chrono::steady_clock::now();
  }
  void end_step() {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
    blocking_ = false;
    for (auto& s : state_) s = "idle";
  }
  void set(int row, std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    state_[row] = std::move(what);
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      if (!running_ || stop_) continue;
      const double secs = seconds_since(started_);
      if (hard_stop_ && hard_limit_ > 0 && blocking_ && seconds_since(blocking_since_) > hard_limit_) {
        std::fprintf(stderr,
                     "gpipe watchdog: %s: step %ld has run for %ld s, %ld s of them %s, past the timeout; ending the job\n",
                     who_.c_str(), static_cast<long>(step_ + 1), static_cast<long>(secs),
                     static_cast<long>(seconds_since(blocking_since_)), state_[0].c_str());
        std::fflush(stderr);
        hard_stop_();
      }
      if (secs < limit_ * (reports_ + 1)) continue;
      ++reports_;
      std::ostringstream os;
      os << "gpipe watchdog: " << who_ << ": step " << step_ + 1 << " has run for " << static_cast<int64_t>(secs)
         << " s;";
      for (size_t i = 0; i < state_.size(); ++i) os << (state_.size() > 1 ? " [" + std::to_string(i) + "] " : " ") << state_[i];
      os << "\n";
      std::fputs(os.str().c_str(), stderr);
      std::fflush(stderr);
    }
  }

  std::string who_;
  double limit_, hard_limit_;
  std::function<void()> hard_stop_;
  std::vector<std::string> state_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, running_ = false, blocking_ = false;
  std::chrono::steady_clock::time_point blocking_since_;
  int64_t step_ = 0;
  int reports_ = 0;
  std::chrono::steady_clock::time_point started_;
  std::thread thread_;
};

Pipeline::Pipeline(Model model, PipelineOptions options, const Batch& sample) : opt_(std::move(options)), model_(std::move(model)) {
  GPIPE_CHECK(!model_.layers.empty(), "pipeline: the model has no layers");
  GPIPE_CHECK(model_.loss != nullptr, "pipeline: the model has no loss");
  GPIPE_CHECK(opt_.micro_batches >= 1, "pipeline: M (micro-batches) must be >= 1, got ", opt_.micro_batches);
  GPIPE_CHECK(opt_.timeout_seconds > 0, "pipeline: timeout must be positive, got ", opt_.timeout_seconds);
  GPIPE_CHECK(opt_.replicas >= 1, "pipeline: the replica count R must be >= 1, got ", opt_.replicas);
  GPIPE_CHECK(opt_.replicas == 1 || opt_.world != nullptr, "pipeline: R = ", opt_.replicas,
              " replicas need one process per stage and replica (launch with mpirun -np K*R)");
  if (!opt_.balance.empty()) {
    GPIPE_CHECK(opt_.partitions == 1 || opt_.partitions == static_cast<int>(opt_.balance.size()), "pipeline: --balance has ",
                opt_.balance.size(), " cells but K = ", opt_.partitions);
    opt_.partitions = static_cast<int>(opt_.balance.size());
  }
  const int k = opt_.partitions;
  GPIPE_CHECK(k >= 1, "pipeline: K (partitions) must be >= 1, got ", k);
  std::set<std::string> names;
  for (const auto& l : model_.layers) {
    GPIPE_CHECK(names.insert(l->name()).second, "pipeline: two layers are named '", l->name(),
                "'; layer names must be unique (they name parameters in checkpoints)");
    layer_names_.push_back(l->name());
  }
  if (opt_.world) {
    dist_ = std::make_unique<Dist>();
    Dist& d = *dist_;
    d.world = opt_.world;
    d.world->set_timeout(opt_.timeout_seconds);
    RankInfo& r = d.info;
    r.world_rank = d.world->rank();
    r.world_size = d.world->size();
    r.stages = k;
    r.replicas = opt_.replicas;
    GPIPE_CHECK(r.world_size == k * opt_.replicas, "pipeline: the job has ", r.world_size, " processes but K x R = ", k,
                " x ", opt_.replicas, " = ", k * opt_.replicas, " (run mpirun -np ", k * opt_.replicas,
                ", or change --K/--replicas)");
    const RankInfo place = rank_info_for(r.world_rank, k, opt_.replicas, opt_.layout);
    r.stage = place.stage;
    r.replica = place.replica;
    d.who = detail::concat("rank ", r.world_rank, " (stage ", r.stage, " of ", k, ", replica ", r.replica, " of ",
                           opt_.replicas, ")");
  }

  // Costs, from the shapes of one micro-batch of the sample. In a
  // multi-process job only the first stage has inputs: rank 0 (stage 0)
  // shares their shapes (the others need no values).
  Batch shaped = sample;
  if (dist_) {
    Message m;
    if (dist_->info.world_rank == 0) m.tensors = sample.inputs;
    std::string header = encode_header(m);
    dist_->world->broadcast(header, 0, "sharing the sample batch's shapes");
    if (dist_->info.world_rank != 0) shaped = Batch{decode_header(header, kCpu).tensors, {}};
  }
  const std::vector<Batch> sample_micro = split_micro_batches(shaped, std::min<int64_t>(opt_.micro_batches, batch_size(shaped)));
  std::vector<BundleSpec> specs;
  const BundleSpec final_spec = infer_specs(model_.layers, spec_of(sample_micro[0].inputs), &specs);
  specs.push_back(final_spec);
  std::vector<double> costs;
  if (opt_.balance_by == BalanceBy::kTime && opt_.balance.empty()) {
    // Measured on one rank and shared, so every rank cuts the model alike.
    if (!dist_ || dist_->info.world_rank == 0) costs = profile_layers(model_.layers, sample_micro[0].inputs);
    if (dist_) {
      std::string bytes(reinterpret_cast<const char*>(costs.data()), costs.size() * sizeof(double));
      dist_->world->broadcast(bytes, 0, "sharing the measured layer times");
      costs.resize(bytes.size() / sizeof(double));
      std::memcpy(costs.data(), bytes.data(), bytes.size());
    }
  } else {
    for (size_t i = 0; i < model_.layers.size(); ++i) {
      if (opt_.balance_by == BalanceBy::kMemory) {
        double bytes = 4.0 * static_cast<double>(model_.layers[i]->parameter_count()) * 4;  // params, grads, 2 Adam moments
        for (const TensorSpec& t : specs[i + 1]) bytes += static_cast<double>(t.shape.numel() * dtype_size(t.dtype));
        costs.push_back(bytes);
      } else {
        costs.push_back(model_.layers[i]->cost(specs[i]));
      }
    }
  }
  partition_ = opt_.balance.empty() ? balanced_partition(costs, k) : explicit_partition(opt_.balance, costs);

  // Devices.
  if (opt_.devices.empty()) opt_.devices = devices("cpu", k);
  GPIPE_CHECK(opt_.devices.size() == 1 || static_cast<int>(opt_.devices.size()) == k, "pipeline: got ",
              opt_.devices.size(), " devices for K = ", k, " cells (give K devices, or one for all cells)");
  for (int s = 0; s < k; ++s) stage_devices_.push_back(opt_.devices.size() == 1 ? opt_.devices[0] : opt_.devices[s]);
  if (dist_) {
    // One kind of device for the whole job: GPU stages talk through the
    // device's communicator (NCCL when the CUDA runtime is linked in).
    Dist& d = *dist_;
    const RankInfo& r = d.info;
    const Device mine = stage_devices_[r.stage];
    double kind[2] = {static_cast<double>(mine.type), static_cast<double>(mine.type)};
    d.world->allreduce(&kind[0], 1, ReduceOp::kMin, "comparing the stages' device kinds");
    d.world->allreduce(&kind[1], 1, ReduceOp::kMax, "comparing the stages' device kinds");
    GPIPE_CHECK(kind[0] == kind[1], d.who, ": the stages of a multi-process job must all be on CPUs or all on GPUs (this "
                "rank's is ", mine, ")");
    d.world = communicator_for(d.world, mine);
    d.pipe = d.world->split(r.replica, r.stage);
    d.replicas = d.world->split(r.stage, r.replica);
    GPIPE_ASSERT(d.pipe->rank() == r.stage && d.replicas->rank() == r.replica);
  }
  for (int s = 0; s < k; ++s) {
    int64_t params = 0, bytes = 0;
    std::unordered_set<TensorImpl*> seen;  // a tensor tied within the cell counts once in the bytes
    for (int64_t i = partition_.begin(s); i < partition_.end(s); ++i) {
      params += model_.layers[i]->parameter_count();
      for (auto& p : model_.layers[i]->parameters())
        if (seen.insert(p.tensor->impl_ptr().get()).second) bytes += static_cast<int64_t>(p.tensor->nbytes());
    }
    cells_.push_back({partition_.begin(s), partition_.end(s), stage_devices_[s], partition_.cell_costs[s], params});
    cell_param_bytes_.push_back(bytes);
  }

  place_parameters();
  const int first = dist_ ? dist_->info.stage : 0, last = dist_ ? dist_->info.stage + 1 : k;
  first_stage_ = first;
  const int local_stages = last - first;
  // Cores: split between this process's stages and the other processes on this host.
  const int per_host = dist_ ? dist_->world->local_size() : 1;
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / per_host);
  for (int s = first; s < last; ++s) {
    LayerList cell(model_.layers.begin() + partition_.begin(s), model_.layers.begin() + partition_.end(s));
    stages_.push_back(std::make_unique<Stage>(s, std::move(cell), partition_.begin(s), stage_devices_[s],
                                              s == k - 1 ? model_.loss : nullptr));
    const int threads = opt_.threads_per_stage > 0 ? opt_.threads_per_stage : std::max(1, cores / local_stages);
    workers_.push_back(std::make_unique<DeviceWorker>(stage_devices_[s], threads));
  }
  if (dist_) {
    // Only this rank's cell stays; the other layers (and their weights) go.
    model_.layers = LayerList(model_.layers.begin() + partition_.begin(first), model_.layers.begin() + partition_.end(first));
    if (first != k - 1) model_.loss.reset();
  }
  make_links();
  schedule_ = make_schedule(opt_.schedule, k, opt_.micro_batches);
  const double watchdog = opt_.watchdog_seconds > 0 ? opt_.watchdog_seconds : opt_.timeout_seconds / 2;
  if (dist_) {
    // The gradient sums may block without a deadline of their own (Note
    // [Large all-reduces]); twice the timeout there means a rank is stuck: end the job.
    std::shared_ptr<Communicator> world = dist_->world;
    watchdog_ = std::make_unique<Watchdog>(dist_->who, watchdog, local_stages, 2 * opt_.timeout_seconds,
                                           [world] { world->abort(1); });
  } else {
    watchdog_ = std::make_unique<Watchdog>("pipeline", watchdog, local_stages);
  }
}

// Placement. A parameter used by several cells (tied weights) gets its own
// copy in every cell after the first, even on a shared device, so no two
// workers ever accumulate into one tensor; sync_tied_gradients sums them.
// In a multi-process job only this rank's cell is placed.
void Pipeline::place_parameters() {
  const int k = static_cast<int>(partition_.cells());
  std::unordered_map<TensorImpl*, std::vector<int>> stages_of;
  std::vector<TensorImpl*> order;  // first appearance
  std::vector<std::vector<std::pair<TensorImpl*, Tensor*>>> slots(k);
  for (int s = 0; s < k; ++s)
    for (int64_t i = partition_.begin(s); i < partition_.end(s); ++i)
      for (auto& p : model_.layers[i]->parameters()) {
        TensorImpl* impl = p.tensor->impl_ptr().get();
        auto& st = stages_of[impl];
        if (st.empty()) order.push_back(impl);
        if (st.empty() || st.back() != s) st.push_back(s);
        slots[s].push_back({impl, p.tensor});
      }
  tied_names_ = tied_parameter_names(model_.layers);
  const int first = dist_ ? dist_->info.stage : 0, last = dist_ ? dist_->info.stage + 1 : k;
  std::map<TensorImpl*, std::vector<Tensor*>> tie_copies;
  std::unordered_map<TensorImpl*, Tensor*> local_copy;
  for (int s = first; s < last; ++s) {
    const Device dev = stage_devices_[s];
    std::unordered_map<TensorImpl*, Tensor> placed;  // this cell's tensor for each original
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
        if (tied) {
          tie_copies[impl].push_back(slot);
          local_copy[impl] = slot;
        }
      }
      *slot = it->second;
    }
    for (int64_t i = partition_.begin(s); i < partition_.end(s); ++i) model_.layers[i]->to(dev);
  }
  if (!dist_) {
    for (auto& [impl, copies] : tie_copies) ties_.push_back(copies);
    return;
  }
  for (TensorImpl* impl : order) {
    if (stages_of[impl].size() < 2) continue;
    auto it = local_copy.find(impl);
    dist_ties_.push_back(
        {impl->shape.numel(), impl->dtype, stages_of[impl], it == local_copy.end() ? nullptr : it->second});
  }
}

void Pipeline::make_links() {
  const int k = static_cast<int>(partition_.cells());
  if (!dist_) {
    std::vector<Transport*> fwd(k, nullptr), bwd(k, nullptr);  // [s]: between s and s+1
    for (int s = 0; s + 1 < k; ++s) {
      links_.push_back(std::make_unique<InProcessTransport>(
          detail::concat("activations from stage ", s, " to ", s + 1), stage_devices_[s + 1]));
      fwd[s] = links_.back().get();
      links_.push_back(std::make_unique<InProcessTransport>(
          detail::concat("gradients from stage ", s + 1, " to ", s), stage_devices_[s]));
      bwd[s] = links_.back().get();
    }
    for (int s = 0; s < k; ++s) {
      fwd_in_.push_back(s > 0 ? fwd[s - 1] : nullptr);
      fwd_out_.push_back(fwd[s]);
      bwd_in_.push_back(bwd[s]);
      bwd_out_.push_back(s > 0 ? bwd[s - 1] : nullptr);
    }
    return;
  }
  const int s = dist_->info.stage;
  Communicator& pipe = *dist_->pipe;
  const Device dev = stage_devices_[s];
  const int replica = dist_->info.replica, replicas = opt_.replicas;
  auto rank_of = [&](int stage) {
    return opt_.layout == RankLayout::kPipelineMajor ? replica * k + stage : stage * replicas + replica;
  };
  auto name = [&](const char* what, int from, int to) {
    return detail::concat(what, " of stage ", from, " (rank ", rank_of(from), ") to stage ", to, " (rank ", rank_of(to),
                          ")");
  };
  auto link = [&](int peer, int channel, const char* what, int from, int to) -> Transport* {
    links_.push_back(pipe.transport(peer, channel, dev, name(what, from, to)));
    return links_.back().get();
  };
  enum Channel { kActivations = 0, kGradients = 1, kPredict = 2 };
  fwd_in_.push_back(s > 0 ? link(s - 1, kActivations, "activations", s - 1, s) : nullptr);
  fwd_out_.push_back(s + 1 < k ? link(s + 1, kActivations, "activations", s, s + 1) : nullptr);
  bwd_in_.push_back(s + 1 < k ? link(s + 1, kGradients, "gradients", s + 1, s) : nullptr);
  bwd_out_.push_back(s > 0 ? link(s - 1, kGradients, "gradients", s, s - 1) : nullptr);
  if (s > 0) predict_in_ = pipe.transport(s - 1, kPredict, dev, name("predictions", s - 1, s));
  if (s + 1 < k) predict_out_ = pipe.transport(s + 1, kPredict, dev, name("predictions", s, s + 1));
}

Pipeline::~Pipeline() {
  // Links before the communicators they were made from (their progress threads use them).
  links_.clear();
  predict_in_.reset();
  predict_out_.reset();
  dist_.reset();
}

RankInfo Pipeline::rank_info() const { return dist_ ? dist_->info : RankInfo{0, 1, 0, 0, static_cast<int>(partition_.cells()), 1}; }

std::vector<std::pair<std::string, int64_t>> Pipeline::bytes_sent() const {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const Transport* t : fwd_out_)
    if (t) out.emplace_back(t->name(), t->bytes_sent());
  for (const Transport* t : bwd_out_)
    if (t) out.emplace_back(t->name(), t->bytes_sent());
  return out;
}

void Pipeline::run_schedule(const std::vector<Batch>& micro, const StepContext& ctx, bool train) {
  const int k = static_cast<int>(partition_.cells());
  const int local_stages = static_cast<int>(stages_.size());
  const auto timeout = std::chrono::duration<double>(opt_.timeout_seconds);
  for (auto& l : links_) l->reset();
  for (auto& s : stages_) s->clear();

  struct Failure {
    int stage = -1;
    Task task{TaskKind::kForward, 0};
    std::string what;
    bool non_finite = false;
  };
  std::mutex fail_mu;
  Failure failure;
  auto abort_all = [&] {
    for (auto& l : links_) l->abort();
  };
  const char* fault = std::getenv("GPIPE_FAULT");  // testing hook: Note [Fault injection]

  std::vector<std::function<void()>> jobs;
  for (int i = 0; i < local_stages; ++i) {
    jobs.push_back([&, i] {
      const int s = first_stage_ + i;
      Stage& stage = *stages_[i];
      Task current{TaskKind::kForward, 0};
      try {
        for (const Task& t : schedule_[s]) {
          current = t;
          if (!train && t.kind == TaskKind::kBackward) continue;
          const int m = t.micro_batch;
          if (t.kind == TaskKind::kForward) {
            Message in;
            if (s == 0) {
              in.tensors = micro[m].inputs;
              in.requires_grad.assign(in.tensors.size(), false);
            } else {
              watchdog_->set(i, detail::concat("waiting for ", fwd_in_[i]->name(), ", micro-batch ", m));
              in = fwd_in_[i]->receive(m, timeout);
            }
            watchdog_->set(i, detail::concat("running the forward of micro-batch ", m, " in stage ", s));
            if (fault) inject_fault(fault, dist_ ? dist_->info.world_rank : 0, ctx.step, m, "forward");
            const bool remat = train && rematerialises(opt_.remat, m, opt_.micro_batches);
            Message out;
            if (train) {
              out = stage.forward(m, in, micro[m].targets, remat, ctx, &tracer_);
            } else {
              NoGradGuard no_grad;
              out = stage.forward(m, in, micro[m].targets, /*remat=*/true, ctx, &tracer_);
            }
            if (s + 1 < k) {
              const double t0 = tracer_.now_us();
              fwd_out_[i]->send(m, std::move(out));
              tracer_.add({"send F" + std::to_string(m), "transfer", s, t0, tracer_.now_us() - t0, m, static_cast<int>(ctx.step)});
            }
          } else {
            Message g;
            if (s + 1 < k) {
              watchdog_->set(i, detail::concat("waiting for ", bwd_in_[i]->name(), ", micro-batch ", m));
              g = bwd_in_[i]->receive(m, timeout);
            }
            watchdog_->set(i, detail::concat("running the backward of micro-batch ", m, " in stage ", s));
            Message gin = stage.backward(m, g, ctx, &tracer_);
            if (s > 0) {
              const double t0 = tracer_.now_us();
              bwd_out_[i]->send(m, std::move(gin));
              tracer_.add({"send B" + std::to_string(m), "transfer", s, t0, tracer_.now_us() - t0, m, static_cast<int>(ctx.step)});
            }
          }
        }
        watchdog_->set(i, "waiting for its last messages to leave");
        if (fwd_out_[i]) fwd_out_[i]->flush(timeout);
        if (bwd_out_[i]) bwd_out_[i]->flush(timeout);
      } catch (const Aborted&) {
        throw;
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lock(fail_mu);
          if (failure.stage < 0) failure = {s, current, e.what(), dynamic_cast<const NonFiniteError*>(&e) != nullptr};
        }
        abort_all();
        throw;
      }
    });
  }
  const auto errors = run_all(workers_, std::move(jobs));
  bool any = false;
  for (auto& e : errors) any = any || e != nullptr;
  if (!any) return;
  // Leave no trace of the failed step: no saved activations, gradients or statistics.
  for (auto& s : stages_) s->clear();
  for (auto& l : links_) l->reset();
  if (train) {
    zero_grad();
    for (auto& l : model_.layers) l->discard_step();
  }
  if (failure.stage < 0) {
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }
  const std::string msg = detail::concat(
      "pipeline step ", ctx.step + 1, " failed in ", dist_ ? dist_->who + ", " : std::string(), "stage ", failure.stage,
      " (", stage_devices_[failure.stage], ", layers [", partition_.begin(failure.stage), ", ",
      partition_.end(failure.stage), ")) during ", task_name(failure.task), ": ", failure.what);
  if (failure.non_finite) throw NonFiniteError(msg);
  throw Error(msg);
}

StepResult Pipeline::train_step(const Batch& batch) {
  const auto t0 = std::chrono::steady_clock::now();
  watchdog_->start_step(step_);
  struct EndStep {
    Watchdog* w;
    ~EndStep() { w->end_step(); }
  } end_step{watchdog_.get()};
  StepResult r;
  const int k = static_cast<int>(partition_.cells());
  const int last_local = first_stage_ + static_cast<int>(stages_.size()) - 1;
  const bool has_first = first_stage_ == 0, has_last = last_local == k - 1;
  std::vector<Batch> micro(opt_.micro_batches);
  double local_terms = 0;
  int64_t local_examples = 0;
  if (has_first || has_last) {
    Batch mine = batch;
    if (dist_) {
      // Replica r takes the rows of micro-batches [rM, rM + M) of the job's R x M.
      GPIPE_CHECK(!has_first || !batch.inputs.empty(), dist_->who, ": train_step needs the batch's inputs on the first stage");
      GPIPE_CHECK(!has_last || !batch.targets.empty(), dist_->who, ": train_step needs the batch's targets on the last stage");
      const int64_t n = batch_size(batch);
      const int rm = opt_.replicas * opt_.micro_batches;
      GPIPE_CHECK(n >= rm, "pipeline: a batch of ", n, " examples cannot feed R x M = ", opt_.replicas, " x ",
                  opt_.micro_batches, " micro-batches (expected at least ", rm, " examples)");
      const std::vector<int64_t> sizes = micro_batch_sizes(n, rm);
      int64_t begin = 0, len = 0;
      for (int i = 0; i < rm; ++i) {
        if (i < dist_->info.replica * opt_.micro_batches) begin += sizes[i];
        else if (i < (dist_->info.replica + 1) * opt_.micro_batches) len += sizes[i];
      }
      for (Tensor& t : mine.inputs) t = ops::narrow(t, 0, begin, len);
      for (Tensor& t : mine.targets) t = ops::narrow(t, 0, begin, len);
    }
    micro = split_micro_batches(mine, opt_.micro_batches);
    local_examples = batch_size(mine);
    for (Batch& b : micro) {
      b.inputs = has_first ? to_device(b.inputs, stage_devices_.front()) : Bundle{};
      b.targets = has_last ? to_device(b.targets, stage_devices_.back()) : Bundle{};
    }
    if (has_last) local_terms = model_.loss->count(mine.targets);
  }
  // The loss is scaled by 1 / (terms of the whole job's mini-batch): Note [Micro-batch weighting].
  double terms = local_terms;
  if (dist_ && has_last && opt_.replicas > 1) dist_->replicas->allreduce(&terms, 1, ReduceOp::kSum, "summing the loss terms of all replicas");
  StepContext ctx{opt_.seed, step_, opt_.micro_batches, 0, terms > 0 ? 1.0 / terms : 0.0,
                  opt_.check_finite && !dist_};
  if (dist_) ctx.micro_batch_offset = dist_->info.replica * opt_.micro_batches;
  if (!opt_.trace) tracer_.clear();
  const double trace_from = tracer_.now_us();
  run_schedule(micro, ctx, /*train=*/true);
  double loss = 0;
  if (has_last)
    for (int m = 0; m < opt_.micro_batches; ++m) loss += stages_.back()->loss(m);
  if (dist_) {
    watchdog_->set(0, "summing gradients with this stage's replicas");
    sync_replicas();
    watchdog_->set(0, "summing the step's loss and tied gradients over all ranks");
    // Over all ranks: the step's totals and which tied tensors got a
    // gradient anywhere (float64), then the tied gradients themselves, one
    // flat tensor per dtype on this stage's device (a device communicator
    // sums it in place).
    std::vector<double> totals = {has_last ? loss : 0.0, has_last ? local_terms : 0.0,
                                  has_last ? static_cast<double>(local_examples) : 0.0};
    for (const DistTie& t : dist_ties_) totals.push_back(t.local && t.local->grad().defined() ? 1.0 : 0.0);
    dist_->world->allreduce(totals.data(), static_cast<int64_t>(totals.size()), ReduceOp::kSum,
                            "summing the step's loss over all ranks");
    loss = totals[0];
    r.loss_terms = totals[1];
    r.examples = static_cast<int64_t>(totals[2]);
    // Every rank is past the small reduction above, so what follows only
    // moves data; its all-reduce may block (Note [Large all-reduces]).
    watchdog_->set_blocking(true);
    std::vector<GradSlot> slots;
    for (size_t i = 0; i < dist_ties_.size(); ++i)
      slots.push_back({dist_ties_[i].local, dist_ties_[i].numel, dist_ties_[i].dtype, totals[3 + i] > 0});
    allreduce_gradients(*dist_->world, slots, stage_devices_[first_stage_],
                        "summing tied gradients over the cells holding them");
    watchdog_->set_blocking(false);
    if (opt_.check_finite && !std::isfinite(loss)) {
      zero_grad();
      for (auto& l : model_.layers) l->discard_step();
      for (auto& s : stages_) s->clear();
      throw NonFiniteError(detail::concat("pipeline step ", step_ + 1, ": the loss is not finite (", loss, ")"));
    }
  } else {
    sync_tied_gradients();
    r.loss_terms = local_terms;
    r.examples = local_examples;
  }
  for (auto& l : model_.layers) l->finish_step();
  r.loss = loss;
  for (auto& s : stages_) s->clear();
  ++step_;
  r.seconds = seconds_since(t0);
  // Measured bubble: idle share of K x (first start .. last end) of this step's compute.
  double lo = 1e300, hi = 0;
  std::vector<double> busy(k, 0.0);
  int rows = 0;
  for (const TraceEvent& e : tracer_.events()) {
    if (e.start_us < trace_from || e.category == "transfer") continue;
    lo = std::min(lo, e.start_us);
    hi = std::max(hi, e.start_us + e.duration_us);
    busy[e.row] += e.duration_us;
  }
  for (double b : busy) rows += b > 0 ? 1 : 0;
  if (hi > lo && !dist_) {
    double total = 0;
    for (double b : busy) total += b;
    r.bubble_fraction = 1.0 - total / (static_cast<double>(k) * (hi - lo));
  } else if (hi > lo && rows > 0) {
    // One stage here: its idle share of the step (the others' clocks are elsewhere).
    r.bubble_fraction = 1.0 - busy[first_stage_] / std::max(1.0, tracer_.now_us() - trace_from);
  }
  return r;
}

// Data parallelism: each stage's gradients (and BatchNorm statistics) summed
// over its replicas. Runs as soon as this rank's last backward is done, while
// the stages before it are still in theirs (the overlap Note [Processes]
// describes). Tied tensors are summed with the all-ranks reduction instead.
void Pipeline::sync_replicas() {
  if (opt_.replicas <= 1) return;
  std::unordered_set<TensorImpl*> tied;
  for (const DistTie& t : dist_ties_)
    if (t.local) tied.insert(t.local->impl_ptr().get());
  std::vector<Tensor*> params;
  for (auto& p : parameters())
    if (!tied.count(p.tensor->impl_ptr().get())) params.push_back(p.tensor);
  // Which gradients exist anywhere (a parameter no replica used keeps none).
  std::vector<double> defined;
  for (Tensor* p : params) defined.push_back(p->grad().defined() ? 1.0 : 0.0);
  std::vector<double> stats;
  std::vector<size_t> stat_sizes;
  if (opt_.sync_batchnorm)
    for (auto& l : model_.layers) {
      const std::vector<double> s = l->step_statistics();
      stat_sizes.push_back(s.size());
      stats.insert(stats.end(), s.begin(), s.end());
    }
  defined.insert(defined.end(), stats.begin(), stats.end());
  if (!defined.empty())
    dist_->replicas->allreduce(defined.data(), static_cast<int64_t>(defined.size()), ReduceOp::kSum,
                               "summing gradient flags and BatchNorm statistics over replicas");
  if (!stats.empty()) {
    size_t at = params.size();
    for (size_t i = 0; i < model_.layers.size(); ++i) {
      if (stat_sizes[i] > 0)
        model_.layers[i]->set_step_statistics(std::vector<double>(defined.begin() + at, defined.begin() + at + stat_sizes[i]));
      at += stat_sizes[i];
    }
  }
  if (const char* fault = std::getenv("GPIPE_FAULT")) inject_fault(fault, dist_->info.world_rank, step_, 0, "sync");
  // The replicas are past the small reduction above, so what follows only
  // moves data; its all-reduce may block (Note [Large all-reduces]).
  watchdog_->set_blocking(true);
  struct Unblock {
    Watchdog* w;
    ~Unblock() { w->set_blocking(false); }
  } unblock{watchdog_.get()};
  std::vector<GradSlot> slots;
  for (size_t i = 0; i < params.size(); ++i)
    slots.push_back({params[i], params[i]->numel(), params[i]->dtype(), defined[i] > 0});
  allreduce_gradients(*dist_->replicas, slots, stage_devices_[first_stage_], "all-reducing gradients over replicas");
}

Bundle Pipeline::forward_to_last(const Bundle& inputs) {
  const int k = static_cast<int>(partition_.cells());
  const int s = dist_->info.stage;
  const int tag = static_cast<int>(predict_calls_++ % (1 << 20));
  const auto timeout = std::chrono::duration<double>(opt_.timeout_seconds);
  Bundle x = s == 0 ? to_device(inputs, stage_devices_[s]) : predict_in_->receive(tag, timeout).tensors;
  int64_t li = partition_.begin(s);
  for (const auto& l : model_.layers) {
    RngScope rng({opt_.seed, static_cast<uint64_t>(step_), 0, static_cast<uint64_t>(li++)});
    x = l->forward(x);
  }
  if (s + 1 < k) {
    Message m;
    m.tensors = x;
    m.requires_grad.assign(x.size(), false);
    predict_out_->send(tag, std::move(m));
    predict_out_->flush(timeout);
    return {};
  }
  return x;
}

double Pipeline::evaluate(const Batch& batch) {
  const int64_t n = batch_size(batch);
  const int m = static_cast<int>(std::min<int64_t>(opt_.micro_batches, n));
  std::vector<Batch> micro = split_micro_batches(batch, m);
  double sum = 0;
  NoGradGuard no_grad;
  const bool was_training = model_.layers.front()->training();
  train(false);
  try {
    if (!dist_) {
      for (const Batch& b : micro) {
        Bundle out = predict(b.inputs);
        sum += model_.loss->sum(out, to_device(b.targets, out[0].device())).item();
      }
    } else {
      // Replica r evaluates micro-batches r, r + R, ...; the last stages hold the sums.
      const bool last = dist_->info.stage == static_cast<int>(partition_.cells()) - 1;
      for (int i = dist_->info.replica; i < m; i += opt_.replicas) {
        Bundle out = forward_to_last(micro[i].inputs);
        if (last) sum += model_.loss->sum(out, to_device(micro[i].targets, out[0].device())).item();
      }
      if (!last) sum = 0;
      dist_->world->allreduce(&sum, 1, ReduceOp::kSum, "summing the evaluation loss");
    }
  } catch (...) {
    train(was_training);
    throw;
  }
  train(was_training);
  const double terms = model_.loss ? model_.loss->count(batch.targets) : 0.0;
  double all_terms = terms;
  if (dist_) {
    const bool last = dist_->info.stage == static_cast<int>(partition_.cells()) - 1;
    all_terms = last && dist_->info.replica == 0 ? terms : 0;
    dist_->world->allreduce(&all_terms, 1, ReduceOp::kSum, "sharing the evaluation's loss terms");
  }
  return all_terms > 0 ? sum / all_terms : 0.0;
}

Bundle Pipeline::predict(const Bundle& inputs) {
  NoGradGuard no_grad;
  // Eval mode for this call (dropout off, BatchNorm on running statistics).
  const bool was_training = model_.layers.front()->training();
  struct RestoreMode {
    Pipeline* p;
    bool on;
    ~RestoreMode() { p->train(on); }
  } restore{this, was_training};
  train(false);
  if (dist_) {
    // The last stage's output, broadcast to every rank of this replica.
    const Bundle out = forward_to_last(inputs);
    const int last = static_cast<int>(partition_.cells()) - 1;
    std::string bytes;
    if (dist_->info.stage == last) {
      Message m;
      m.tensors = out;
      bytes = serialize_message(m);
    }
    dist_->pipe->broadcast(bytes, last, "sharing the prediction of the last stage");
    return deserialize_message(bytes, kCpu).tensors;
  }
  Bundle x = inputs;
  for (auto& st : stages_) {
    x = to_device(x, st->device());
    int64_t li = partition_.begin(st->index());
    for (const auto& l : st->layers()) {
      RngScope rng({opt_.seed, static_cast<uint64_t>(step_), 0, static_cast<uint64_t>(li++)});
      x = l->forward(x);
    }
  }
  return x;
}

void Pipeline::sync_tied_gradients() {
  NoGradGuard no_grad;
  MemoryCategoryGuard cat(MemoryCategory::kGradient);
  for (auto& copies : ties_) {
    Tensor sum;
    const Device home = copies[0]->device();
    for (Tensor* c : copies) {
      Tensor g = c->grad();
      if (!g.defined()) continue;
      sum = sum.defined() ? ops::add(sum, g.to(home)) : g.to(home).clone();
    }
    if (!sum.defined()) continue;
    for (Tensor* c : copies) c->set_grad(sum.to(c->device()).clone());
  }
}

namespace {

double sum_of_squares(const Tensor& g) {
  const Tensor c = (g.device().is_cpu() ? g : g.to(kCpu)).contiguous();
  double s = 0;
  if (c.dtype() == DType::kFloat32) {
    const float* p = c.data<float>();
    for (int64_t i = 0; i < c.numel(); ++i) s += static_cast<double>(p[i]) * p[i];
  } else if (c.dtype() == DType::kFloat64) {
    const double* p = c.data<double>();
    for (int64_t i = 0; i < c.numel(); ++i) s += p[i] * p[i];
  } else {
    throw Error(detail::concat("grad_norm: gradients of dtype ", c.dtype(), " are not supported"));
  }
  return s;
}

}  // namespace

double Pipeline::grad_norm() {
  // Each tied tensor counts once: its copy in the first cell holding it.
  std::unordered_set<TensorImpl*> skip;
  for (auto& copies : ties_)
    for (size_t i = 1; i < copies.size(); ++i) skip.insert(copies[i]->impl_ptr().get());
  for (const DistTie& t : dist_ties_)
    if (t.local && t.stages.front() != first_stage_) skip.insert(t.local->impl_ptr().get());
  double sq = 0;
  if (!dist_ || dist_->info.replica == 0)  // replicas hold identical gradients after the step
    for (auto& p : parameters()) {
      const Tensor g = p.tensor->grad();
      if (g.defined() && !skip.count(p.tensor->impl_ptr().get())) sq += sum_of_squares(g);
    }
  if (dist_) dist_->world->allreduce(&sq, 1, ReduceOp::kSum, "summing the gradient norm");
  return std::sqrt(sq);
}

void Pipeline::scale_grads(double factor) {
  NoGradGuard no_grad;
  for (auto& p : parameters()) {
    Tensor g = p.tensor->grad();
    if (g.defined()) g.copy_from(ops::mul_scalar(g, factor));
  }
}

double Pipeline::clip_grad_norm(double max_norm) {
  GPIPE_CHECK(max_norm > 0 && std::isfinite(max_norm), "clip_grad_norm: max_norm must be positive and finite, got ", max_norm);
  const double norm = grad_norm();
  if (std::isfinite(norm) && norm > max_norm) scale_grads(max_norm / (norm + 1e-6));
  return norm;
}

std::vector<NamedTensor> Pipeline::parameters() { return named_parameters(model_.layers); }

std::vector<NamedTensor> Pipeline::named_state() { return gpipe::named_state(model_.layers); }

void Pipeline::zero_grad() {
  for (auto& p : parameters()) p.tensor->zero_grad();
}

void Pipeline::train(bool on) {
  for (auto& l : model_.layers) l->train(on);
}

std::vector<CellInfo> Pipeline::cells() const { return cells_; }

std::string Pipeline::describe() const {
  std::ostringstream os;
  const auto& cs = cells_;
  char line[256];
  const char* cost_label = !opt_.balance.empty() ? "cost (given)"
                           : opt_.balance_by == BalanceBy::kTime ? "seconds"
                           : opt_.balance_by == BalanceBy::kMemory ? "bytes" : "FLOPs";
  auto names_of = [&](const CellInfo& c) {
    return layer_names_[c.first_layer] + ".." + layer_names_[c.last_layer - 1];
  };
  int width = 28;  // the first..last column fits the longest pair of layer names
  for (const CellInfo& c : cs) width = std::max(width, static_cast<int>(names_of(c).size()));
  width = std::min(width, 120);
  std::snprintf(line, sizeof(line), "%-5s %-8s %-12s %-*s %14s %12s %10s\n", "cell", "device", "layers", width,
                "first..last", cost_label, "parameters", "param MB");
  os << line;
  for (size_t s = 0; s < cs.size(); ++s) {
    const std::string range = "[" + std::to_string(cs[s].first_layer) + ", " + std::to_string(cs[s].last_layer) + ")";
    std::snprintf(line, sizeof(line), "%-5zu %-8s %-12s %-*s %14.4g %12ld %10.2f\n", s, cs[s].device.str().c_str(),
                  range.c_str(), width, names_of(cs[s]).c_str(), cs[s].cost, static_cast<long>(cs[s].parameters),
                  cell_param_bytes_[s] / 1048576.0);
    os << line;
  }
  os << "schedule " << schedule_name(opt_.schedule) << ", M = " << opt_.micro_batches << ", remat "
     << remat_name(opt_.remat) << ", ideal bubble " << ideal_bubble_fraction(static_cast<int>(cs.size()), opt_.micro_batches)
     << "\n";
  if (dist_)
    os << "processes: " << dist_->info.world_size << " = K " << static_cast<int>(partition_.cells()) << " x R " << opt_.replicas << " ("
       << rank_layout_name(opt_.layout) << "-major ranks), links over "
       << (links_.empty() ? "none" : links_.front()->kind()) << "\n";
  return os.str();
}

std::vector<DeviceMemory> Pipeline::memory() const {
  std::vector<DeviceMemory> out;
  std::set<std::pair<int, int>> seen;
  for (const auto& st : stages_) {
    const Device d = st->device();
    if (!seen.insert({static_cast<int>(d.type), d.index}).second) continue;
    const MemoryStats s = allocator_for(d).stats();
    out.push_back({d, s.live_bytes(MemoryCategory::kParameter), s.live_bytes(MemoryCategory::kGradient),
                   s.live_bytes(MemoryCategory::kOptimizerState), s.peak_bytes(MemoryCategory::kActivation), s.peak_total});
  }
  return out;
}

void Pipeline::reset_memory_peaks() {
  for (const auto& st : stages_) allocator_for(st->device()).reset_peak();
}

void Pipeline::write_trace(const std::string& path) const {
  std::vector<std::string> rows;
  for (size_t s = 0; s < cells_.size(); ++s) rows.push_back("stage " + std::to_string(s) + " (" + stage_devices_[s].str() + ")");
  tracer_.write(path, rows);
}

}  // namespace gpipe
