// The executor walks its action list in order. Receives block (with the
// timeout) until the neighbour's send arrives; sends return at once (the
// link keeps the tensors until they have left). A failure in any action is
// recorded with its stage and action, wakes the other local ranks, and
// propagates; the Pipeline reports it (Invariant 5: nothing hangs).
#include "pipeline/executor.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_set>

#include "ops/reduce.h"
#include "ops/weight_cast.h"
#include "pipeline/gradients.h"
#include "runtime/delayed_transport.h"

namespace gpipe {
namespace {

// Marks, for the watchdog, a phase whose all-reduce may block without a
// deadline (Note [Large all-reduces]), until it ends (or throws).
class BlockingPhase {
 public:
  explicit BlockingPhase(Watchdog* w) : w_(w) {
    if (w_) w_->set_blocking(true);
  }
  ~BlockingPhase() {
    if (w_) w_->set_blocking(false);
  }
  BlockingPhase(const BlockingPhase&) = delete;
  BlockingPhase& operator=(const BlockingPhase&) = delete;

 private:
  Watchdog* w_;
};

}  // namespace

void FailureLog::record(int stage, const std::string& action, const std::exception& e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stage_ >= 0) return;
    stage_ = stage;
    action_ = action;
    what_ = e.what();
    non_finite_ = dynamic_cast<const NonFiniteError*>(&e) != nullptr;
  }
  if (on_first_) on_first_();
}

bool FailureLog::any() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stage_ >= 0;
}

void FailureLog::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  stage_ = -1;
  action_.clear();
  what_.clear();
  non_finite_ = false;
}

StageExecutor::StageExecutor(ExecutorOptions options, std::unique_ptr<Stage> stage,
                             std::vector<TiedWeight> ties)
    : opt_(options), stage_(std::move(stage)), ties_(std::move(ties)) {}

StageExecutor::~StageExecutor() {
  // Links before the communicators they were made from (their progress threads use them).
  act_in_.reset();
  act_out_.reset();
  grad_in_.reset();
  grad_out_.reset();
  turns_.clear();
  skips_out_.clear();
  skip_grads_in_.clear();
  skips_in_.clear();
  skip_grads_out_.clear();
}

void StageExecutor::connect(std::shared_ptr<Communicator> world) {
  const RankInfo& r = opt_.info;
  const Device mine = stage_->device();
  fault("connect", 0, 0);  // before any communicator of this rank exists
  world->set_timeout(opt_.timeout_seconds);
  // One kind of device for the whole job: GPU stages talk through the
  // device's communicator (NCCL when the CUDA runtime is linked in).
  double kind[2] = {static_cast<double>(mine.type), static_cast<double>(mine.type)};
  world->allreduce(&kind[0], 1, ReduceOp::kMin, "comparing the stages' device kinds");
  world->allreduce(&kind[1], 1, ReduceOp::kMax, "comparing the stages' device kinds");
  GPIPE_CHECK(kind[0] == kind[1], "rank ", r.world_rank,
              ": the stages of a job must all be on CPUs or all on GPUs (this "
              "rank's is ",
              mine, ")");
  world_ = communicator_for(world, mine);
  pipe_ = world_->split(r.replica, r.stage);
  replicas_ = world_->split(r.stage, r.replica);
  GPIPE_ASSERT(pipe_->rank() == r.stage && replicas_->rank() == r.replica);
  const int k = r.cells, s = r.stage;
  auto name = [&](const char* what, int from, int to) {
    return detail::concat(what, " of stage ", from, " (rank ",
                          world_rank_of(from, r.replica, k, r.replicas, opt_.layout), ") to stage ",
                          to, " (rank ", world_rank_of(to, r.replica, k, r.replicas, opt_.layout),
                          ")");
  };
  // Channel 2 carries predictions (pipeline/inference.cc); 3 the device turns.
  enum Channel { kActivations = 0, kGradients = 1, kTurns = 3, kSkips = 4, kSkipGradients = 5 };
  static_assert(kSkipGradients < kTransportChannels);
  if (s > 0) act_in_ = pipe_->transport(s - 1, kActivations, mine, name("activations", s - 1, s));
  if (s + 1 < k)
    act_out_ = pipe_->transport(s + 1, kActivations, mine, name("activations", s, s + 1));
  if (s + 1 < k) grad_in_ = pipe_->transport(s + 1, kGradients, mine, name("gradients", s + 1, s));
  if (s > 0) grad_out_ = pipe_->transport(s - 1, kGradients, mine, name("gradients", s, s - 1));
  // A link to every other cell of this cell's device (Note [Device turns] in
  // pipeline/placement.cc).
  for (int o : opt_.device_peers) {
    GPIPE_CHECK(o >= 0 && o < k && o != s, "stage ", s, ": bad device peer ", o);
    turns_[o] = pipe_->transport(o, kTurns, mine, name("device turns", s, o));
  }
  // Two links per pair of cells a direct skip connects (Note [Skips]).
  const SkipRoutes& routes = stage_->routes();
  for (const auto& [c, names] : routes.to) {
    skips_out_[c] = pipe_->transport(c, kSkips, mine, name("skips", s, c));
    skip_grads_in_[c] = pipe_->transport(c, kSkipGradients, mine, name("skip gradients", c, s));
  }
  for (const auto& [p, names] : routes.from) {
    skips_in_[p] = pipe_->transport(p, kSkips, mine, name("skips", p, s));
    skip_grads_out_[p] = pipe_->transport(p, kSkipGradients, mine, name("skip gradients", s, p));
  }
  if (opt_.link_delay_seconds > 0) slow_links(mine);
}

// Tests and benchmarks: the sends to other devices through a delay line.
void StageExecutor::slow_links(Device mine) {
  GPIPE_CHECK(mine.is_cpu(), "link_delay_seconds: a delayed link is for CPU stages, stage ",
              opt_.info.stage, " is on ", mine);
  const auto& same = opt_.device_peers;
  auto slow = [&](std::unique_ptr<Transport>& t, int peer) {
    if (t && std::find(same.begin(), same.end(), peer) == same.end())
      t = std::make_unique<DelayedTransport>(std::move(t), opt_.link_delay_seconds);
  };
  slow(act_out_, opt_.info.stage + 1);
  slow(grad_out_, opt_.info.stage - 1);
  for (auto& [c, t] : skips_out_) slow(t, c);
  for (auto& [p, t] : skip_grads_out_) slow(t, p);
}

void StageExecutor::receive_skips(std::map<int, std::unique_ptr<Transport>>& links, int m,
                                  const char* what, SkipMessages& into) {
  const auto timeout = std::chrono::duration<double>(opt_.timeout_seconds);
  for (auto& [peer, link] : links) {
    wait_state(detail::concat("waiting for ", link->name(), ", micro-batch ", m, " (", what, ")"));
    into[peer] = link->receive(m, timeout);
  }
}

void StageExecutor::send_skips(std::map<int, std::unique_ptr<Transport>>& links, SkipMessages& msgs,
                               int m, const char* what, int64_t step) {
  Tracer* tracer = opt_.tracer;
  for (auto& [peer, msg] : msgs) {
    const double t0 = tracer->now_us();
    links.at(peer)->send(m, std::move(msg));
    tracer->add({detail::concat(what, m, ">", peer), "transfer", opt_.info.stage, t0,
                 tracer->now_us() - t0, m, static_cast<int>(step)});
  }
}

std::string StageExecutor::action_name(const Action& a) const {
  const std::string m = std::to_string(a.micro_batch);
  switch (a.kind) {
    case ActionKind::kRecvActivations:
      return "the receive of micro-batch " + m + "'s activations";
    case ActionKind::kForward:
      return "forward of micro-batch " + m;
    case ActionKind::kSendActivations:
      return "the send of micro-batch " + m + "'s activations";
    case ActionKind::kLoss:
      return "the loss of micro-batch " + m;
    case ActionKind::kRecompute:
      return "recompute of micro-batch " + m;
    case ActionKind::kRecvGradients:
      return "the receive of micro-batch " + m + "'s gradients";
    case ActionKind::kBackward:
      return "backward of micro-batch " + m;
    case ActionKind::kBackwardInput:
      return "input backward of micro-batch " + m;
    case ActionKind::kBackwardWeight:
      return "weight backward of micro-batch " + m;
    case ActionKind::kSendGradients:
      return "the send of micro-batch " + m + "'s gradients";
    case ActionKind::kReduceReplicas:
      return "the gradient sum over replicas";
    case ActionKind::kReduceTied:
      return "the sum of the step's totals and tied gradients";
    case ActionKind::kRecvTurn:
      return "waiting for turn " + m + " of its device";
    case ActionKind::kSendTurn:
      return "handing over its device (turn " + m + ")";
  }
  return "?";
}

void StageExecutor::wait_state(const std::string& what) {
  if (opt_.watchdog) opt_.watchdog->set(opt_.row, what);
}

StepTotals StageExecutor::run(const std::vector<Action>& actions, bool training,
                              const std::vector<Batch>& micro, const StepContext& ctx,
                              const StepTotals& local) {
  const auto timeout = std::chrono::duration<double>(opt_.timeout_seconds);
  const int s = opt_.info.stage;
  Tracer* tracer = opt_.tracer;
  // The weights do not change during a program: each 16-bit weight is
  // rounded once for all its micro-batches (Note [Weight casts] in ops/weight_cast.h).
  const ops::WeightCastScope weight_casts;
  // Remat is in the program: a micro-batch with an R here keeps no graph from its F.
  std::unordered_set<int> recomputed;
  for (const Action& a : actions)
    if (a.kind == ActionKind::kRecompute) recomputed.insert(a.micro_batch);
  StepTotals totals = local;
  totals.loss = 0;
  received_.clear();
  to_send_.clear();
  std::optional<NoGradGuard> no_grad;
  if (!training) no_grad.emplace();
  auto traced_send = [&](Transport& link, int m, Message msg, const char* what) {
    const double t0 = tracer->now_us();
    link.send(m, std::move(msg));
    tracer->add({std::string(what) + std::to_string(m), "transfer", s, t0, tracer->now_us() - t0, m,
                 static_cast<int>(ctx.step)});
  };
  auto take = [&](std::map<int, Message>& from, int m) {
    auto it = from.find(m);
    GPIPE_ASSERT(it != from.end(), "stage ", s, ": no message for micro-batch ", m);
    Message msg = std::move(it->second);
    from.erase(it);
    return msg;
  };
  Action current{ActionKind::kForward, 0};
  bool flushing = false;
  try {
    for (const Action& a : actions) {
      current = a;
      const int m = a.micro_batch;
      switch (a.kind) {
        case ActionKind::kRecvActivations:
          wait_state(detail::concat("waiting for ", act_in_->name(), ", micro-batch ", m));
          received_[m] = act_in_->receive(m, timeout);
          break;
        case ActionKind::kForward: {
          StageMessage in;
          receive_skips(skips_in_, m, "skips", in.skips);
          wait_state(detail::concat("running the forward of micro-batch ", m, " in stage ", s));
          fault("forward", ctx.step, m);
          if (s == 0) {
            in.main.tensors = micro[m].inputs;
            in.main.requires_grad.assign(in.main.tensors.size(), false);
          } else {
            in.main = take(received_, m);
          }
          StageMessage out = stage_->forward(m, in, training && !recomputed.count(m), ctx, tracer);
          send_skips(skips_out_, out.skips, m, "send S", ctx.step);
          if (!stage_->is_last()) to_send_[m] = std::move(out.main);
          break;
        }
        case ActionKind::kSendActivations:
          traced_send(*act_out_, m, take(to_send_, m), "send F");
          break;
        case ActionKind::kLoss:
          totals.loss += stage_->loss(m, micro[m].targets, ctx);
          break;
        case ActionKind::kRecompute:
          wait_state(detail::concat("recomputing micro-batch ", m, " in stage ", s));
          stage_->recompute(m, ctx, tracer);
          break;
        case ActionKind::kRecvGradients:
          wait_state(detail::concat("waiting for ", grad_in_->name(), ", micro-batch ", m));
          received_[m] = grad_in_->receive(m, timeout);
          break;
        case ActionKind::kBackward:
        case ActionKind::kBackwardInput: {
          const bool split = a.kind == ActionKind::kBackwardInput;
          StageMessage g;
          receive_skips(skip_grads_in_, m, "skip gradients", g.skips);
          wait_state(detail::concat("running the ", split ? "input " : "",
                                    "backward of micro-batch ", m, " in stage ", s));
          if (!stage_->is_last()) g.main = take(received_, m);
          StageMessage gin = split ? stage_->backward_input(m, g, ctx, tracer)
                                   : stage_->backward(m, g, ctx, tracer);
          send_skips(skip_grads_out_, gin.skips, m, "send SB", ctx.step);
          if (s > 0) to_send_[m] = std::move(gin.main);
          break;
        }
        case ActionKind::kBackwardWeight:
          wait_state(
              detail::concat("running the weight backward of micro-batch ", m, " in stage ", s));
          stage_->backward_weight(m, ctx, tracer);
          break;
        case ActionKind::kSendGradients:
          traced_send(*grad_out_, m, take(to_send_, m), "send B");
          break;
        case ActionKind::kRecvTurn: {
          Transport& link = turn_link(m);
          wait_state(detail::concat("waiting for ", link.name(), ", turn ", m));
          link.receive(m, timeout);
          break;
        }
        case ActionKind::kSendTurn:
          turn_link(m).send(m, Message{});
          break;
        case ActionKind::kReduceReplicas:
        case ActionKind::kReduceTied: {
          const double t0 = tracer->now_us();
          if (a.kind == ActionKind::kReduceReplicas)
            reduce_replicas(ctx);
          else
            reduce_tied(ctx, totals);
          tracer->add({to_string(a), "reduce", s, t0, tracer->now_us() - t0, -1,
                       static_cast<int>(ctx.step)});
          break;
        }
      }
    }
    wait_state("waiting for its last messages to leave");
    flushing = true;
    if (act_out_) act_out_->flush(timeout);
    if (grad_out_) grad_out_->flush(timeout);
    for (auto& [peer, link] : turns_) link->flush(timeout);
    for (auto* links : {&skips_out_, &skip_grads_out_})
      for (auto& [peer, link] : *links) link->flush(timeout);
  } catch (const Aborted&) {
    throw;
  } catch (const std::exception& e) {
    if (opt_.failures)
      opt_.failures->record(
          s, flushing ? std::string("the flush of its last sends") : action_name(current), e);
    throw;
  }
  return totals;
}

// Data parallelism: this stage's gradients (and BatchNorm statistics) summed
// over its replicas. It runs as soon as this rank's last backward is done,
// while the stages before it are still in theirs (the overlap Note
// [Processes] describes). Tied tensors are summed over all ranks instead.
void StageExecutor::reduce_replicas(const StepContext& ctx) {
  if (opt_.info.replicas <= 1) return;
  wait_state("summing gradients with this stage's replicas");
  std::unordered_set<TensorImpl*> tied;
  for (const TiedWeight& t : ties_)
    if (t.local) tied.insert(t.local->impl_ptr().get());
  std::vector<Tensor*> params;
  for (auto& p : named_parameters(stage_->layers()))
    if (!tied.count(p.tensor->impl_ptr().get())) params.push_back(p.tensor);
  // Which gradients exist anywhere (a parameter no replica used keeps none).
  std::vector<double> defined;
  for (Tensor* p : params) defined.push_back(p->grad().defined() ? 1.0 : 0.0);
  std::vector<size_t> stat_sizes;
  if (opt_.sync_batchnorm)
    for (auto& l : stage_->layers()) {
      const std::vector<double> st = l->step_statistics();
      stat_sizes.push_back(st.size());
      defined.insert(defined.end(), st.begin(), st.end());
    }
  if (!defined.empty())
    replicas_->allreduce(defined.data(), static_cast<int64_t>(defined.size()), ReduceOp::kSum,
                         "summing gradient flags and BatchNorm statistics over replicas");
  if (!stat_sizes.empty()) {
    size_t at = params.size();
    for (size_t i = 0; i < stage_->layers().size(); ++i) {
      if (stat_sizes[i] > 0)
        stage_->layers()[i]->set_step_statistics(
            std::vector<double>(defined.begin() + at, defined.begin() + at + stat_sizes[i]));
      at += stat_sizes[i];
    }
  }
  fault("sync", ctx.step, 0);
  // The replicas are past the small reduction above, so what follows only
  // moves data; its all-reduce may block (Note [Large all-reduces]).
  const BlockingPhase blocking(opt_.watchdog);
  std::vector<GradSlot> slots;
  for (size_t i = 0; i < params.size(); ++i)
    slots.push_back({params[i], params[i]->numel(), params[i]->dtype(), defined[i] > 0});
  allreduce_gradients(*replicas_, slots, stage_->device(), "all-reducing gradients over replicas");
}

// Over all ranks: the step's totals and which tied weights got a gradient
// anywhere (float64), then the tied gradients themselves, one flat tensor
// per dtype on this stage's device (a device communicator sums it in place).
void StageExecutor::reduce_tied(const StepContext& ctx, StepTotals& totals) {
  wait_state("summing the step's loss and tied gradients over all ranks");
  const bool last = stage_->is_last();
  std::vector<double> sums = {last ? totals.loss : 0.0, last ? totals.terms : 0.0,
                              last ? totals.examples : 0.0};
  for (const TiedWeight& t : ties_)
    sums.push_back(t.local && t.local->grad().defined() ? 1.0 : 0.0);
  world_->allreduce(sums.data(), static_cast<int64_t>(sums.size()), ReduceOp::kSum,
                    "summing the step's loss over all ranks");
  totals = {sums[0], sums[1], sums[2]};
  // Every rank is past the small reduction above, so what follows only
  // moves data; its all-reduce may block (Note [Large all-reduces]).
  const BlockingPhase blocking(opt_.watchdog);
  std::vector<GradSlot> slots;
  for (size_t i = 0; i < ties_.size(); ++i)
    slots.push_back({ties_[i].local, ties_[i].numel, ties_[i].dtype, sums[3 + i] > 0});
  fault("tied", ctx.step, 0);
  allreduce_gradients(*world_, slots, stage_->device(),
                      "summing tied gradients over the cells holding them");
}

double StageExecutor::grad_norm() {
  std::unordered_set<TensorImpl*> skip;  // tied copies after the first cell's
  for (const TiedWeight& t : ties_)
    if (t.local && t.stages.front() != opt_.info.stage) skip.insert(t.local->impl_ptr().get());
  std::vector<Tensor> grads;
  if (opt_.info.replica == 0)  // replicas hold identical gradients after the step
    for (auto& p : named_parameters(stage_->layers())) {
      const Tensor g = p.tensor->grad();
      if (g.defined() && !skip.count(p.tensor->impl_ptr().get())) grads.push_back(g);
    }
  // On the stage's device, one copy of the per-tensor sums back (ops/reduce.h).
  double sq = ops::sum_of_squares(grads, "grad_norm");
  world_->allreduce(&sq, 1, ReduceOp::kSum, "summing the gradient norm");
  return std::sqrt(sq);
}

Transport& StageExecutor::turn_link(int turn) {
  auto peer = opt_.turn_peer.find(turn);
  GPIPE_CHECK(peer != opt_.turn_peer.end(), "stage ", opt_.info.stage, ": turn ", turn,
              " has no peer in its program");
  auto link = turns_.find(peer->second);
  GPIPE_ASSERT(link != turns_.end(), "stage ", opt_.info.stage, ": no device-turn link to stage ",
               peer->second);
  return *link->second;
}

std::vector<Transport*> StageExecutor::links() const {
  std::vector<Transport*> out;
  for (Transport* t : {act_in_.get(), act_out_.get(), grad_in_.get(), grad_out_.get()})
    if (t) out.push_back(t);
  for (const auto& [peer, t] : turns_) out.push_back(t.get());
  for (const auto* links : {&skips_out_, &skip_grads_in_, &skips_in_, &skip_grads_out_})
    for (const auto& [peer, t] : *links) out.push_back(t.get());
  return out;
}

void StageExecutor::reset_links() {
  for (Transport* t : links()) t->reset();
}

void StageExecutor::fault(const char* where, int64_t step, int micro_batch) const {
  if (opt_.fault_hook && *opt_.fault_hook)
    (*opt_.fault_hook)({opt_.info.world_rank, step, micro_batch, where});
}

void StageExecutor::abort_links() {
  for (Transport* t : links()) t->abort();
}

void StageExecutor::drop_pending() {
  for (Transport* t : links()) t->drop_pending();
  received_.clear();
  to_send_.clear();
}

std::vector<std::pair<std::string, int64_t>> StageExecutor::bytes_sent() const {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const Transport* t : {act_out_.get(), grad_out_.get()})
    if (t) out.emplace_back(t->name(), t->bytes_sent());
  for (const auto* links : {&skips_out_, &skip_grads_out_})
    for (const auto& [peer, t] : *links) out.emplace_back(t->name(), t->bytes_sent());
  return out;
}

const char* StageExecutor::link_kind() const {
  for (const Transport* t : {act_in_.get(), act_out_.get()})
    if (t) return t->kind();
  return "none";
}

}  // namespace gpipe
