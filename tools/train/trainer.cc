// The training loop around Pipeline::train_step: setup, steps, evaluations,
// checkpoints. What the run reports as it goes is run_log.h's.
//
// Exact resumption: everything a step depends on is a function of the step
// number or is in the checkpoint. The batch is Task::batch_at(step); the
// dropout keys are (seed, step, micro-batch, layer), restored through
// Pipeline::set_step; the learning rate is the schedule at step + 1; the
// parameters, BatchNorm statistics and optimizer moments are in the file.
// So a run resumed at step s takes bitwise the same steps s+1.. as one that
// never stopped, with the same K, M and thread counts.
#include "tools/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "core/parallel.h"
#include "core/precision.h"
#include "data/loader.h"
#include "data/text_tokenizer.h"
#include "ops/cpu/blas.h"
#include "optim/adam.h"
#include "optim/checkpoint.h"
#include "optim/clip.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/rmsprop.h"
#include "optim/safetensors.h"
#include "optim/sgd.h"
#include "pipeline/simulate.h"
#include "tools/train/hf_io.h"
#include "tools/train/interrupt.h"
#include "tools/train/metrics_log.h"
#include "tools/train/planning.h"
#include "tools/train/preflight.h"
#include "tools/train/report.h"
#include "tools/train/run_log.h"
#include "tools/train/version.h"

namespace gpipe::train {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

std::string checkpoint_path(const std::string& pattern, int64_t step) {
  std::string out = pattern;
  for (size_t at = out.find("{step}"); at != std::string::npos; at = out.find("{step}", at))
    out.replace(at, 6, std::to_string(step));
  return out;
}

namespace {

// Swallows everything (the log of ranks other than 0).
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
};

class Trainer {
 public:
  Trainer(const TrainConfig& config, std::ostream& log, std::shared_ptr<Communicator> world)
      : null_stream_(&null_buffer_),
        log_(world && world->rank() != 0 ? null_stream_ : log),
        world_(world) {
    c_ = config;
    const int processes = world_ ? world_->size() : 1;
    const int cells = c_.K * c_.virtual_stages;  // one process per cell and replica
    const std::string kv = c_.virtual_stages > 1 ? "K x v x R" : "K x R";
    if (!world_ || world_->size() == 1)
      usage(c_.replicas == 1, "--replicas=", c_.replicas, ": R replicas of a ", cells,
            "-stage pipeline need ", kv, " = ", c_.replicas * cells,
            " processes, one per stage and replica (launch with mpirun -np ", c_.replicas * cells,
            " gpipe_train ...)");
    if (processes > 1)
      usage(processes == cells * c_.replicas, "the job has ", processes,
            " processes but --K=", c_.K,
            c_.virtual_stages > 1 ? detail::concat(" x --virtual=", c_.virtual_stages) : "",
            " x --replicas=", c_.replicas, " = ", cells * c_.replicas, " (expected mpirun -np ", kv,
            ": one process per stage and replica)");
    if (processes == 1) world_.reset();
    usage(!world_ || c_.export_hf.empty(),
          "--export-hf: writes from one process (start it without mpirun; --resume takes the "
          "job's sharded checkpoint)");
    if (world_) {
      // This process reads only the training data its stage consumes.
      const RankInfo me =
          rank_info_for(world_->rank(), cells, c_.replicas, parse_rank_layout(c_.layout));
      c_.train_inputs = me.stage == 0;
      c_.train_targets = me.stage == cells - 1;
    }
    if (c_.batch == 0) c_.batch = default_batch(c_.model);
    task_ = make_task(c_);  // loads the data; before anything slow is built
    task_->apply_data_shape(c_);
    c_ = resolve_defaults(c_, task_->train_size() / c_.batch);
    const std::string compute =
        ops::cpu::compute_description();  // a bad GPIPE_CPU_ISA or GPIPE_GEMM stops here
    log_ << version_line("gpipe_train") << "\n";
    log_ << "compute: " << compute << "\n";
    log_ << task_->describe() << "\n";
    // The caller's own pool (evaluation, optimizer, clipping) gets the threads of all
    // this process's stages: all K in one process, one under mpirun, where the
    // host's cores are shared by its ranks.
    if (world_) {
      const int cores = static_cast<int>(std::thread::hardware_concurrency());
      set_default_intra_op_threads(c_.threads > 0 ? c_.threads
                                                  : std::max(1, cores / world_->local_size()));
    } else if (c_.threads > 0) {
      set_default_intra_op_threads(c_.threads * c_.K);
    }
    // The pipeline's options, resolved once (by parse_train_flags, or here for
    // a config built in code), and again only when the planner changes them.
    ResolvedOptions po = c_.pipeline ? *c_.pipeline : resolve_pipeline(c_);
    if (!c_.plan.empty() || c_.balance_by == "plan") {
      apply_plan(c_, *task_, world_ != nullptr, log_, po.options);
      po = resolve_pipeline(std::move(po.options));
    }
    po.options.world = world_;
    po.options.seed = dropout_seed(c_);
    // Tests of failure handling set GPIPE_FAULT (Note [Fault injection] in pipeline/faults.h).
    if (const char* fault = std::getenv("GPIPE_FAULT"))
      po.options.fault_hook = fault_hook_from_spec(fault);
    pipe_ = std::make_unique<Pipeline>(task_->make_model(), std::move(po), task_->batch_at(0));
    parameters_ = parameter_count(c_);
    opt_ = make_optimizer(c_, pipe_->parameters());
    if (const LossScaleSetting ls = loss_scale_setting(c_); ls.dynamic)
      scaler_.emplace(optim::LossScalerOptions{.initial_scale = ls.scale});
    else
      static_scale_ = ls.scale;
    log_ << pipe_->describe() << setup_line() << "\n";
    schedule_ = optim::parse_lr_schedule(c_.lr_schedule, *c_.lr);
    if (!c_.init_from.empty()) {  // each rank reads its own cells' tensors
      load_hf_weights(c_.init_from, lm_model_config(c_), pipe_->named_state());
      log_ << "initialised the weights from the Hugging Face folder " << c_.init_from << "\n";
    }
    if (!c_.resume.empty()) resume();
    run_log_.emplace(c_, *task_, log_, root());
    summary().parameters = parameters_;
    summary().first_step = summary().last_step = pipe_->steps_done();
    const BubbleFormula bubble = pipe_->bubble_formula();
    summary().ideal_bubble = bubble.value;
    summary().ideal_bubble_formula = bubble.text;
  }

  TrainSummary run() {
    if (!c_.export_data.empty()) {
      export_data();
      return summary();
    }
    int64_t step = pipe_->steps_done();
    if (step >= c_.steps)
      log_ << "already at step " << step << " of " << c_.steps << ": nothing to train\n";
    // Each rank keeps only what its stage consumes: inputs on the first
    // stage, targets on the last; the stages between make no batches.
    const RankInfo me = pipe_->rank_info();
    const bool want_inputs = me.stage == 0 || !pipe_->distributed();
    const bool want_targets = me.stage == me.cells - 1 || !pipe_->distributed();
    PrefetchLoader loader(
        [task = task_.get(), s = step, end = c_.steps, want_inputs,
         want_targets]() mutable -> std::optional<Batch> {
          if (s >= end) return std::nullopt;
          if (!want_inputs && !want_targets) {
            ++s;
            return Batch{};
          }
          Batch b = task->batch_at(s++);
          if (!want_inputs) b.inputs.clear();
          if (!want_targets) b.targets.clear();
          return b;
        },
        2);
    while (step < c_.steps) {
      if (const int sig = agreed_interrupt()) stop_for_signal(sig, step);
      const auto t0 = Clock::now();
      std::optional<Batch> batch = loader.next();
      GPIPE_ASSERT(batch.has_value(), "the batch stream ended early at step ", step);
      train_one(*batch, step, t0);
      ++step;
      summary().seconds += since(t0);
      summary().last_step = step;
      if (step % c_.log_every == 0 || step == c_.steps)
        run_log_->progress(step, live_megabytes(), schedule_label());
      if (c_.save_every > 0 && step % c_.save_every == 0 && step < c_.steps) save(step);
      // The last step's evaluation is the final one, unless --no-final-eval.
      if (c_.eval_every > 0 && step % c_.eval_every == 0 && (step < c_.steps || !c_.final_eval))
        evaluate(step, /*final=*/false);
    }
    finish(step);
    return summary();
  }

 private:
  TrainSummary& summary() { return run_log_->summary(); }

  // "transformer: 960,768 parameters; adam lr 0.002 (cosine:...); batch 32, 600 steps"
  std::string setup_line() {
    int64_t stored = 0;
    for (const auto& p : pipe_->parameters()) stored += p.tensor->numel();
    std::ostringstream os;
    os << c_.model << ": " << with_commas(parameters_) << " parameters";
    if (pipe_->distributed())
      os << " (" << with_commas(stored) << " on rank 0's cell)";
    else if (stored != parameters_)
      os << " (" << with_commas(stored)
         << " stored: tied weights have a copy in each cell using them)";
    os << "; " << c_.optimizer << " lr " << *c_.lr << " (" << c_.lr_schedule << ")";
    if (c_.weight_decay.value_or(0) > 0) os << ", weight decay " << *c_.weight_decay;
    if (c_.momentum) os << ", momentum " << *c_.momentum;
    if (c_.clip_norm > 0) os << ", clip norm " << c_.clip_norm;
    if (label_smoothing_of(c_) > 0) os << ", label smoothing " << label_smoothing_of(c_);
    os << "; batch " << c_.batch << ", " << c_.steps << " steps";
    if (c_.precision != "fp32") {
      os << "; precision " << c_.precision;
      if (scaler_)
        os << ", dynamic loss scale from " << scaler_->scale();
      else if (static_scale_ != 1)
        os << ", loss scale " << static_scale_;
    }
    return os.str();
  }

  bool root() const { return !world_ || world_->rank() == 0; }

  // run_metadata, the data position at `step` (Note [Data position] in
  // data_position.cc) and the loss scaler's state (a resumed float16 run goes on exactly).
  std::map<std::string, std::string> checkpoint_metadata(int64_t step) const {
    std::map<std::string, std::string> m = run_metadata(c_, *task_);
    for (const auto& [k, v] : task_->data_position(step)) m[k] = v;
    if (scaler_) scaler_->save(m, "train.loss_scale.");
    return m;
  }

  static void usage(bool ok, auto&&... parts) {
    if (!ok) throw UsageError(detail::concat(parts...));
  }

  void resume() {
    int64_t step = 0;
    // Any layout's checkpoint: a single file or a sharded one, from any K, R
    // or one process. Each rank takes the tensors of its own layers.
    optim::load_checkpoint(
        c_.resume, pipe_->named_state(), opt_.get(), &step,
        {.allow_unexpected = pipe_->distributed(), .aliases = pipe_->tied_names()});
    pipe_->set_step(step);
    const auto saved = optim::load_safetensors(c_.resume).metadata;
    for (const std::string& w : check_data_position(saved, *task_, step, c_.resume))
      log_ << "warning: --resume: " << w << "\n";
    if (scaler_) {
      if (saved.count("train.loss_scale.scale")) {
        scaler_->load(saved, "train.loss_scale.");
        log_ << "resumed the loss scale at " << scaler_->scale() << "\n";
      } else {
        log_ << "warning: --resume: the checkpoint has no loss scale; starting from "
             << scaler_->scale() << "\n";
      }
    }
    for (const auto& [key, now] : run_metadata(c_, *task_)) {
      if (key == "train.steps") continue;  // extending a run is what resuming is for
      auto it = saved.find(key);
      // Checkpoints from before --precision existed were float32 runs.
      if (key == "train.precision" && it == saved.end() && now == "fp32") continue;
      const std::string then = it == saved.end() ? "(absent)" : it->second;
      if (then != now)
        log_ << "warning: --resume: the checkpoint was saved with " << key << " = '" << then
             << "', this run has '" << now << "'; the steps after " << step
             << " will differ from an uninterrupted run\n";
    }
    log_ << "resumed from " << c_.resume << " at step " << step << "\n";
  }

  void train_one(const Batch& batch, int64_t step, Clock::time_point t0) {
    const double lr = schedule_->lr_at(step + 1);
    opt_->set_lr(lr);
    pipe_->reset_memory_peaks();
    // Loss scaling (optim/loss_scaler.h): the gradients come out S times
    // larger and are divided by S before clipping and the update.
    const double scale = scaler_ ? scaler_->scale() : static_scale_;
    pipe_->set_loss_scale(scale);
    StepResult r;
    std::string skip_reason;
    try {
      r = pipe_->train_step(batch);
    } catch (const NonFiniteError&) {
      pipe_->set_step(step + 1);  // keep the dropout keys of later steps where they would have been
      skip_reason = "the loss is not finite";
      r.loss = NAN;
      r.examples = c_.batch;
    }
    if (skip_reason.empty()) {
      if (scale != 1) pipe_->scale_grads(1 / scale);
      // Over every cell of the model (all ranks of a multi-process job alike).
      const double norm =
          c_.clip_norm > 0 ? pipe_->clip_grad_norm(c_.clip_norm) : pipe_->grad_norm();
      if (!std::isfinite(norm))
        skip_reason = scaler_ ? detail::concat("the gradients overflowed at loss scale ", scale)
                              : std::string("the gradient norm is not finite");
    }
    if (scaler_ && !scaler_->update(skip_reason.empty()))
      skip_reason += detail::concat("; loss scale now ", scaler_->scale());
    const double t_opt = pipe_->tracer().now_us();
    if (skip_reason.empty()) opt_->step();
    pipe_->zero_grad();
    if (!c_.trace.empty())
      for (size_t s = 0; s < pipe_->cells().size(); ++s)
        pipe_->tracer().add({"optimizer", "optimizer", static_cast<int>(s), t_opt,
                             pipe_->tracer().now_us() - t_opt, -1, static_cast<int>(step)});
    if (!skip_reason.empty()) {
      ++summary().skipped_steps;
      log_ << "warning: step " << step + 1 << " skipped (" << skip_reason << "); "
           << summary().skipped_steps << " skipped so far\n";
    }
    run_log_->step(r, step + 1, lr, !skip_reason.empty(), since(t0), pipe_->memory());
  }

  // The schedule in use, as the bubble figures name it.
  std::string schedule_label() const {
    return c_.schedule.rfind("file:", 0) == 0 ? std::string("program") : c_.schedule;
  }

  double live_megabytes() const {
    int64_t bytes = 0;
    for (const DeviceMemory& m : pipe_->memory()) bytes += m.live_bytes;
    return static_cast<double>(bytes) / 1e6;
  }

  void evaluate(int64_t step, bool final) { run_log_->eval(task_->evaluate(*pipe_), step, final); }

  // --export-data: the task's data and settings, the initial weights as a
  // checkpoint at step 0; no step is taken.
  void export_data() {
    if (world_) throw UsageError("--export-data: runs in one process (start it without mpirun)");
    JsonLine settings;
    settings.add("optimizer", opt_->name());
    JsonLine hyper;
    for (const auto& [k, v] : opt_->hyper_params()) hyper.add(k, v);
    settings.add_json("hyper_params", hyper.str());
    settings.add("lr", *c_.lr).add("lr_schedule", schedule_->str());
    settings.add("clip_norm", c_.clip_norm).add("seed", static_cast<int64_t>(c_.seed));
    settings.add("partitions", c_.K).add("micro_batches", c_.M);
    task_->export_data(*pipe_, settings.str(), c_.steps, c_.export_data);
    const std::string weights =
        (std::filesystem::path(c_.export_data) / "init.safetensors").string();
    optim::save_checkpoint(weights, pipe_->named_state(), *opt_, 0, run_metadata(c_, *task_));
    log_ << "exported the data of " << c_.steps << " steps and the initial weights to "
         << c_.export_data << " (data.json, init.safetensors"
         << (lm_model(c_.model) ? ", init-hf/" : "") << ")\n";
  }

  // Note [Clean stop] in interrupt.cc: the signal any rank has seen, agreed
  // by all ranks at the same step (0: none).
  int agreed_interrupt() {
    double sig = interrupt_signal();
    if (pipe_->distributed())
      world_->allreduce(&sig, 1, ReduceOp::kMax, "agreeing whether a signal stops the run");
    return static_cast<int>(sig);
  }

  [[noreturn]] void stop_for_signal(int sig, int64_t step) {
    std::string outcome;
    if (c_.save.empty())
      outcome = "no checkpoint: --save not given";
    else if (step == summary().first_step)
      outcome = detail::concat("no checkpoint: no step taken since the start at step ", step);
    else {
      if (saved_step_ != step) save(step);
      outcome = "checkpoint saved to " + checkpoint_path(c_.save, step);
    }
    log_.flush();
    throw Interrupted(
        sig, detail::concat("interrupted at step ", step, " by ", signal_name(sig), "; ", outcome));
  }

  void save(int64_t step) {
    saved_step_ = step;
    const std::string path = checkpoint_path(c_.save, step);
    if (pipe_->distributed()) {
      // Every stage's ranks of replica 0 write a shard; rank 0 the manifest once all have.
      const RankInfo me = pipe_->rank_info();
      optim::save_sharded_checkpoint(
          *world_, {.writer = me.replica == 0, .shard = me.stage, .shards = me.cells}, path,
          pipe_->named_state(), *opt_, step, checkpoint_metadata(step));
    } else {
      optim::save_checkpoint(path, pipe_->named_state(), *opt_, step, checkpoint_metadata(step));
    }
    log_ << "saved checkpoint " << path << " at step " << step << "\n";
  }

  void finish(int64_t step) {
    const int64_t done = step - summary().first_step;
    run_log_->finish(step, schedule_label(), pipe_->schedule().device_count(),
                     static_cast<int>(pipe_->cells().size()));
    if (!c_.save.empty() && done > 0) save(step);
    if (!c_.export_hf.empty()) {
      export_hf(c_.export_hf, lm_model_config(c_), pipe_->named_state(),
                text_tokenizer(c_.tokenizer)->eot_id());
      log_ << "exported the weights as a Hugging Face folder: " << c_.export_hf << "\n";
    }
    if (!c_.trace.empty()) {
      // One file per rank in a multi-process job: <trace>.rank<r>.
      const std::string path =
          world_ ? detail::concat(c_.trace, ".rank", world_->rank()) : c_.trace;
      pipe_->write_trace(path);
      log_ << "wrote Chrome trace " << path << " and its picture " << svg_path_for(path)
           << (world_ ? " (and one per other rank)" : "") << "\n";
    }
    if (c_.final_eval) evaluate(step, /*final=*/true);
    run_log_->write_plot();
  }

  NullBuffer null_buffer_;
  std::ostream null_stream_;
  std::ostream& log_;
  std::shared_ptr<Communicator> world_;
  TrainConfig c_;
  std::unique_ptr<Task> task_;
  std::unique_ptr<Pipeline> pipe_;
  std::unique_ptr<optim::Optimizer> opt_;
  std::optional<optim::LossScaler> scaler_;  // --loss-scale=dynamic
  double static_scale_ = 1;                  // a fixed --loss-scale, else 1
  std::unique_ptr<optim::LrSchedule> schedule_;
  int64_t parameters_ = 0;         // the formula's count (tied weights once)
  int64_t saved_step_ = -1;        // the step of the last checkpoint written
  std::optional<RunLog> run_log_;  // made once the config is final
};

}  // namespace

TrainSummary train(const TrainConfig& config, std::ostream& log,
                   std::shared_ptr<Communicator> world) {
  validate(config);
  if (config.print_params) {
    TrainSummary s;
    s.parameters = print_parameter_count(config, log);
    return s;
  }
  if (config.print_schedule || !config.schedule_svg.empty()) {
    print_schedule(config, log);
    return {};
  }
  // Refused before anything is built or started (Note [Preflight] in preflight.cc).
  const bool several = world && world->size() > 1;
  const int cells = config.K * config.virtual_stages;
  check_memory(config, several ? 1 : cells, cells, several ? world->local_size() : 1);
  check_threads(config, several ? 1 : cells, log);
  Trainer trainer(config, log, std::move(world));
  return trainer.run();
}

}  // namespace gpipe::train
