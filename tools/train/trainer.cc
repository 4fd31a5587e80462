// The training loop around Pipeline::train_step.
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
#include <fstream>
#include <iomanip>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "core/parallel.h"
#include "core/precision.h"
#include "data/loader.h"
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
#include "tools/train/metrics_log.h"
#include "tools/train/planning.h"
#include "tools/train/plot.h"
#include "tools/train/report.h"

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
    if (world_) {
      // This process reads only the training data its stage consumes.
      const RankInfo me =
          rank_info_for(world_->rank(), cells, c_.replicas, parse_rank_layout(c_.layout));
      c_.train_inputs = me.stage == 0;
      c_.train_targets = me.stage == cells - 1;
    }
    if (c_.batch == 0) c_.batch = default_batch(c_.model);
    task_ = make_task(c_);  // loads the data; before anything slow is built
    c_ = resolve_defaults(c_, task_->train_size() / c_.batch);
    const std::string compute =
        ops::cpu::compute_description();  // a bad GPIPE_CPU_ISA or GPIPE_GEMM stops here
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
    summary_.parameters = parameter_count(c_);
    opt_ = make_optimizer(c_, pipe_->parameters());
    if (const LossScaleSetting ls = loss_scale_setting(c_); ls.dynamic)
      scaler_.emplace(optim::LossScalerOptions{.initial_scale = ls.scale});
    else
      static_scale_ = ls.scale;
    log_ << pipe_->describe() << setup_line() << "\n";
    schedule_ = optim::parse_lr_schedule(c_.lr_schedule, *c_.lr);
    if (!c_.resume.empty()) resume();
    summary_.first_step = summary_.last_step = pipe_->steps_done();
    const BubbleFormula bubble = pipe_->bubble_formula();
    summary_.ideal_bubble = bubble.value;
    summary_.ideal_bubble_formula = bubble.text;
    if (!c_.metrics.empty() && root())
      metrics_ = MetricsLog(c_.metrics, /*append=*/!c_.resume.empty());
    if (!c_.plot.empty() && root()) {  // found out now, not after the run
      std::ofstream probe(c_.plot, std::ios::app);
      GPIPE_CHECK(probe.good(), "--plot: cannot write '", c_.plot, "'");
    }
  }

  TrainSummary run() {
    if (!c_.export_data.empty()) {
      export_data();
      return summary_;
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
      const auto t0 = Clock::now();
      std::optional<Batch> batch = loader.next();
      GPIPE_ASSERT(batch.has_value(), "the batch stream ended early at step ", step);
      train_one(*batch, step, t0);
      ++step;
      summary_.seconds += since(t0);
      summary_.last_step = step;
      if (step % c_.log_every == 0 || step == c_.steps) log_progress(step);
      if (c_.save_every > 0 && step % c_.save_every == 0 && step < c_.steps) save(step);
      // The last step's evaluation is the final one, unless --no-final-eval.
      if (c_.eval_every > 0 && step % c_.eval_every == 0 && (step < c_.steps || !c_.final_eval))
        evaluate(step, /*final=*/false);
    }
    finish(step);
    return summary_;
  }

 private:
  // "transformer: 960,768 parameters; adam lr 0.002 (cosine:...); batch 32, 600 steps"
  std::string setup_line() {
    int64_t stored = 0;
    for (const auto& p : pipe_->parameters()) stored += p.tensor->numel();
    std::ostringstream os;
    os << c_.model << ": " << with_commas(summary_.parameters) << " parameters";
    if (pipe_->distributed())
      os << " (" << with_commas(stored) << " on rank 0's cell)";
    else if (stored != summary_.parameters)
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

  // run_metadata plus the loss scaler's state (a resumed float16 run goes on exactly).
  std::map<std::string, std::string> checkpoint_metadata() const {
    std::map<std::string, std::string> m = run_metadata(c_, *task_);
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
      ++summary_.skipped_steps;
      log_ << "warning: step " << step + 1 << " skipped (" << skip_reason << "); "
           << summary_.skipped_steps << " skipped so far\n";
    }
    record(r, step + 1, lr, !skip_reason.empty(), since(t0));
  }

  void record(const StepResult& r, int64_t step, double lr, bool skipped, double secs) {
    summary_.losses.push_back(r.loss);
    bubble_sum_ += r.bubble_fraction;
    ++bubble_count_;
    window_bubble_ += r.bubble_fraction;
    ++window_bubble_steps_;
    examples_ += r.examples;
    tokens_ += r.loss_terms;
    window_loss_ += std::isfinite(r.loss) ? r.loss : 0;
    window_steps_ += std::isfinite(r.loss) ? 1 : 0;
    window_examples_ += r.examples;
    window_tokens_ += r.loss_terms;
    window_seconds_ += secs;
    std::vector<double> peaks;
    for (const DeviceMemory& m : pipe_->memory()) peaks.push_back(m.peak_activation_bytes / 1e6);
    if (window_peaks_.size() < peaks.size()) window_peaks_.resize(peaks.size(), 0);
    for (size_t i = 0; i < peaks.size(); ++i)
      window_peaks_[i] = std::max(window_peaks_[i], peaks[i]);
    last_lr_ = lr;
    plot_loss_.points.emplace_back(step, r.loss);
    plot_lr_.points.emplace_back(step, lr);
    plot_rate_.points.emplace_back(step, r.examples / std::max(secs, 1e-9));
    if (!metrics_.enabled()) return;
    JsonLine line;
    line.add("type", "train").add("step", step).add("loss", r.loss).add("lr", lr);
    line.add("examples_per_s", r.examples / std::max(secs, 1e-9));
    if (task_->counts_tokens()) line.add("tokens_per_s", r.loss_terms / std::max(secs, 1e-9));
    line.add("seconds", secs)
        .add("elapsed", summary_.seconds + secs)
        .add("peak_activation_mb", peaks);
    line.add("bubble_fraction", r.bubble_fraction)
        .add("bubble_ideal", summary_.ideal_bubble)
        .add("skipped", skipped);
    metrics_.write(line);
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

  void log_progress(int64_t step) {
    const double secs =
        std::max(window_seconds_, 1e-9);  // training time only: evaluations excluded
    const int64_t done = step - summary_.first_step;
    const double eta = summary_.seconds / std::max<int64_t>(done, 1) * (c_.steps - step);
    std::ostringstream os;
    const int width = static_cast<int>(std::to_string(c_.steps).size());
    os << "step " << std::setw(width) << step << "/" << c_.steps << "  loss " << std::fixed
       << std::setprecision(4) << (window_steps_ > 0 ? window_loss_ / window_steps_ : NAN)
       << "  lr " << std::scientific << std::setprecision(2) << last_lr_ << std::fixed
       << std::setprecision(0);
    if (task_->counts_tokens()) os << "  " << window_tokens_ / secs << " tok/s";
    os << "  " << std::setprecision(1) << window_examples_ / secs << " ex/s  act peak";
    for (size_t i = 0; i < window_peaks_.size(); ++i)
      os << (i ? "/" : " ") << std::setprecision(1) << window_peaks_[i];
    // Bytes the pipeline's devices hold between steps (parameters, gradients,
    // optimizer state, caches): flat from one log line to the next unless
    // something leaks (tools/gpu_check.sh checks that on cuda:0).
    os << " MB  live " << std::setprecision(1) << live_megabytes();
    os << " MB  bubble " << std::setprecision(3)
       << (window_bubble_steps_ > 0 ? window_bubble_ / window_bubble_steps_ : NAN) << " ("
       << schedule_label() << " " << summary_.ideal_bubble_formula << " " << summary_.ideal_bubble
       << ")  ETA " << duration_text(eta) << "\n";
    log_ << os.str() << std::flush;
    window_loss_ = window_examples_ = window_tokens_ = window_seconds_ = window_bubble_ = 0;
    window_steps_ = window_bubble_steps_ = 0;
    window_peaks_.assign(window_peaks_.size(), 0.0);
  }

  void evaluate(int64_t step, bool final) {
    const EvalResult r = task_->evaluate(*pipe_);
    std::ostringstream os;
    os << std::fixed << "eval at step " << step << ": held-out loss " << std::setprecision(4)
       << r.loss << " (" << r.examples << " examples)";
    if (r.accuracy)
      os << (r.iou ? ", pixel accuracy " : ", accuracy ") << std::setprecision(2)
         << 100 * *r.accuracy << "%";
    if (r.iou) os << ", foreground IoU " << std::setprecision(3) << *r.iou;
    if (r.token_accuracy)
      os << ", token accuracy " << std::setprecision(2) << 100 * *r.token_accuracy << "%";
    if (r.chrf)
      os << ", chrF " << std::setprecision(2) << *r.chrf << " (" << r.sentences
         << " greedy translations)";
    os << "  [" << duration_text(r.seconds) << "]\n";
    if (final)
      for (int64_t i = 0; i < std::min<int64_t>(c_.samples, r.samples.size()); ++i) {
        const SampleTranslation& s = r.samples[i];
        os << "  <" << s.language << "> " << s.source << "\n    reference:  " << s.reference
           << "\n    hypothesis: " << s.hypothesis << "\n";
      }
    log_ << os.str() << std::flush;
    JsonLine line;
    line.add("type", "eval").add("step", step).add("loss", r.loss).add("examples", r.examples);
    if (r.accuracy) line.add("accuracy", *r.accuracy);
    if (r.iou) line.add("iou", *r.iou);
    if (r.token_accuracy) line.add("token_accuracy", *r.token_accuracy);
    if (r.chrf) line.add("chrf", *r.chrf).add("sentences", r.sentences);
    line.add("seconds", r.seconds);
    metrics_.write(line);
    // The final evaluation's translations, every one, for scoring elsewhere.
    if (final)
      for (const SampleTranslation& s : r.samples) {
        JsonLine t;
        t.add("type", "translation").add("step", step).add("language", s.language);
        t.add("source", s.source).add("reference", s.reference).add("hypothesis", s.hypothesis);
        metrics_.write(t);
      }
    plot_eval_loss_.points.emplace_back(step, r.loss);
    const std::optional<double> metric = r.chrf       ? r.chrf
                                         : r.iou      ? r.iou
                                         : r.accuracy ? std::optional<double>(100 * *r.accuracy)
                                                      : std::nullopt;
    if (metric) plot_metric_.points.emplace_back(step, *metric);
    plot_metric_.name = r.chrf  ? "held-out chrF"
                        : r.iou ? "held-out foreground IoU"
                                : "test accuracy (%)";
    if (final) summary_.final_eval = r;
  }

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
         << c_.export_data << " (data.json, init.safetensors)\n";
  }

  void save(int64_t step) {
    const std::string path = checkpoint_path(c_.save, step);
    if (pipe_->distributed()) {
      // Every stage's ranks of replica 0 write a shard; rank 0 the manifest once all have.
      const RankInfo me = pipe_->rank_info();
      optim::save_sharded_checkpoint(
          *world_, {.writer = me.replica == 0, .shard = me.stage, .shards = me.cells}, path,
          pipe_->named_state(), *opt_, step, checkpoint_metadata());
    } else {
      optim::save_checkpoint(path, pipe_->named_state(), *opt_, step, checkpoint_metadata());
    }
    log_ << "saved checkpoint " << path << " at step " << step << "\n";
  }

  void finish(int64_t step) {
    const int64_t done = step - summary_.first_step;
    if (done > 0 && summary_.seconds > 0) {
      summary_.examples_per_s = examples_ / summary_.seconds;
      summary_.tokens_per_s = tokens_ / summary_.seconds;
      summary_.measured_bubble = bubble_sum_ / std::max<int64_t>(bubble_count_, 1);
      std::ostringstream os;
      os << std::fixed << std::setprecision(1) << "trained " << done << " steps in "
         << duration_text(summary_.seconds) << ": " << summary_.examples_per_s << " examples/s";
      if (task_->counts_tokens())
        os << ", " << std::setprecision(0) << summary_.tokens_per_s << " tokens/s";
      os << std::setprecision(3) << "; bubble fraction measured " << summary_.measured_bubble
         << ", " << schedule_label() << " ideal " << summary_.ideal_bubble_formula << " "
         << summary_.ideal_bubble << " (K=" << pipe_->schedule().device_count()
         << (pipe_->schedule().device_count() < static_cast<int>(pipe_->cells().size())
                 ? detail::concat(" devices, ", pipe_->cells().size(), " cells")
                 : std::string())
         << ", M=" << c_.M << ")";
      if (summary_.skipped_steps > 0)
        os << "; " << summary_.skipped_steps << " steps skipped (not finite)";
      log_ << os.str() << "\n";
    }
    if (!c_.save.empty() && done > 0) save(step);
    if (!c_.trace.empty()) {
      // One file per rank in a multi-process job: <trace>.rank<r>.
      const std::string path =
          world_ ? detail::concat(c_.trace, ".rank", world_->rank()) : c_.trace;
      pipe_->write_trace(path);
      log_ << "wrote Chrome trace " << path << " and its picture " << svg_path_for(path)
           << (world_ ? " (and one per other rank)" : "") << "\n";
    }
    if (c_.final_eval) evaluate(step, /*final=*/true);
    if (!c_.plot.empty() && root()) write_plot();
  }

  void write_plot() {
    plot_rate_.name = "examples per second (each step)";
    const std::string svg = metrics_svg(
        detail::concat("gpipe_train --model=", c_.model, ": steps ", summary_.first_step + 1, "..",
                       summary_.last_step, ", K=", c_.K, ", M=", c_.M),
        {plot_loss_, plot_lr_, plot_rate_, plot_eval_loss_, plot_metric_});
    std::ofstream out(c_.plot);
    out << svg;
    GPIPE_CHECK(out.good(), "--plot: cannot write '", c_.plot, "'");
    log_ << "wrote the run's plot to " << c_.plot << "\n";
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
  MetricsLog metrics_;
  // --plot: this run's series (a resumed run draws its own steps only).
  PlotSeries plot_loss_{"training loss", {}, false}, plot_lr_{"learning rate", {}, false},
      plot_rate_, plot_eval_loss_{"held-out loss", {}, true},
      plot_metric_{"held-out metric", {}, true};
  TrainSummary summary_;
  double bubble_sum_ = 0, examples_ = 0, tokens_ = 0, window_bubble_ = 0;
  int64_t bubble_count_ = 0;
  double window_seconds_ = 0, window_loss_ = 0, window_examples_ = 0, window_tokens_ = 0,
         last_lr_ = 0;
  int64_t window_steps_ = 0, window_bubble_steps_ = 0;
  std::vector<double> window_peaks_;
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
  Trainer trainer(config, log, std::move(world));
  return trainer.run();
}

}  // namespace gpipe::train
