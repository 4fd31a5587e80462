// The training run's reporting: per-step figures gathered into windows (one
// progress line each) and totals (the summary and the closing line), each
// step and evaluation also a --metrics JSON line and --plot points.
#include "tools/train/run_log.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "tools/train/report.h"
#include "tools/train/version.h"

namespace gpipe::train {

RunLog::RunLog(const TrainConfig& c, const Task& task, std::ostream& log, bool root)
    : c_(c), task_(task), log_(log), root_(root) {
  if (!c_.metrics.empty() && root_)
    metrics_ = MetricsLog(c_.metrics, /*append=*/!c_.resume.empty());
  if (metrics_.enabled()) {  // which gpipe wrote the lines that follow
    JsonLine line;
    line.add("type", "run").add("version", version()).add("commit", build_commit());
    line.add("model", c_.model);
    metrics_.write(line);
  }
  if (!c_.plot.empty() && root_) {  // found out now, not after the run
    std::ofstream probe(c_.plot, std::ios::app);
    GPIPE_CHECK(probe.good(), "--plot: cannot write '", c_.plot, "'");
  }
}

void RunLog::step(const StepResult& r, int64_t step, double lr, bool skipped, double secs,
                  const std::vector<DeviceMemory>& memory) {
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
  for (const DeviceMemory& m : memory) peaks.push_back(m.peak_activation_bytes / 1e6);
  if (window_peaks_.size() < peaks.size()) window_peaks_.resize(peaks.size(), 0);
  for (size_t i = 0; i < peaks.size(); ++i) window_peaks_[i] = std::max(window_peaks_[i], peaks[i]);
  last_lr_ = lr;
  plot_loss_.points.emplace_back(step, r.loss);
  plot_lr_.points.emplace_back(step, lr);
  plot_rate_.points.emplace_back(step, r.examples / std::max(secs, 1e-9));
  if (!metrics_.enabled()) return;
  JsonLine line;
  line.add("type", "train").add("step", step).add("loss", r.loss).add("lr", lr);
  line.add("examples_per_s", r.examples / std::max(secs, 1e-9));
  if (task_.counts_tokens()) line.add("tokens_per_s", r.loss_terms / std::max(secs, 1e-9));
  line.add("seconds", secs)
      .add("elapsed", summary_.seconds + secs)
      .add("peak_activation_mb", peaks);
  line.add("bubble_fraction", r.bubble_fraction)
      .add("bubble_ideal", summary_.ideal_bubble)
      .add("skipped", skipped);
  metrics_.write(line);
}

void RunLog::progress(int64_t step, double live_mb, const std::string& schedule) {
  const double secs = std::max(window_seconds_, 1e-9);  // training time only: evaluations excluded
  const int64_t done = step - summary_.first_step;
  const double eta = summary_.seconds / std::max<int64_t>(done, 1) * (c_.steps - step);
  std::ostringstream os;
  const int width = static_cast<int>(std::to_string(c_.steps).size());
  os << "step " << std::setw(width) << step << "/" << c_.steps << "  loss " << std::fixed
     << std::setprecision(4) << (window_steps_ > 0 ? window_loss_ / window_steps_ : NAN) << "  lr "
     << std::scientific << std::setprecision(2) << last_lr_ << std::fixed << std::setprecision(0);
  if (task_.counts_tokens()) os << "  " << window_tokens_ / secs << " tok/s";
  os << "  " << std::setprecision(1) << window_examples_ / secs << " ex/s  act peak";
  for (size_t i = 0; i < window_peaks_.size(); ++i)
    os << (i ? "/" : " ") << std::setprecision(1) << window_peaks_[i];
  // Bytes the pipeline's devices hold between steps (parameters, gradients,
  // optimizer state, caches): flat from one log line to the next unless
  // something leaks (tools/gpu_check.sh checks that on cuda:0).
  os << " MB  live " << std::setprecision(1) << live_mb;
  os << " MB  bubble " << std::setprecision(3)
     << (window_bubble_steps_ > 0 ? window_bubble_ / window_bubble_steps_ : NAN) << " (" << schedule
     << " " << summary_.ideal_bubble_formula << " " << summary_.ideal_bubble << ")  ETA "
     << duration_text(eta) << "\n";
  log_ << os.str() << std::flush;
  window_loss_ = window_examples_ = window_tokens_ = window_seconds_ = window_bubble_ = 0;
  window_steps_ = window_bubble_steps_ = 0;
  window_peaks_.assign(window_peaks_.size(), 0.0);
}

void RunLog::eval(const EvalResult& r, int64_t step, bool final) {
  std::ostringstream os;
  os << std::fixed << "eval at step " << step << ": held-out loss " << std::setprecision(4)
     << r.loss << " (" << r.examples << " examples)";
  if (r.accuracy)
    os << (r.iou ? ", pixel accuracy " : ", accuracy ") << std::setprecision(2) << 100 * *r.accuracy
       << "%";
  if (r.iou) os << ", foreground IoU " << std::setprecision(3) << *r.iou;
  if (r.perplexity) os << ", perplexity " << std::setprecision(3) << *r.perplexity;
  if (r.token_accuracy)
    os << ", token accuracy " << std::setprecision(2) << 100 * *r.token_accuracy << "%";
  if (r.chrf)
    os << ", chrF " << std::setprecision(2) << *r.chrf << " (" << r.sentences
       << " greedy translations)";
  os << "  [" << duration_text(r.seconds) << "]\n";
  if (final)
    for (int64_t i = 0; i < std::min<int64_t>(c_.samples, r.samples.size()); ++i) {
      const SampleTranslation& s = r.samples[i];
      os << "  " << (s.language.empty() ? "" : "<" + s.language + "> ") << s.source
         << "\n    reference:  " << s.reference << "\n    hypothesis: " << s.hypothesis << "\n";
    }
  log_ << os.str() << std::flush;
  JsonLine line;
  line.add("type", "eval").add("step", step).add("loss", r.loss).add("examples", r.examples);
  if (r.accuracy) line.add("accuracy", *r.accuracy);
  if (r.iou) line.add("iou", *r.iou);
  if (r.perplexity) line.add("perplexity", *r.perplexity);
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

void RunLog::finish(int64_t step, const std::string& schedule, int devices, int cells) {
  const int64_t done = step - summary_.first_step;
  if (done <= 0 || summary_.seconds <= 0) return;
  summary_.examples_per_s = examples_ / summary_.seconds;
  summary_.tokens_per_s = tokens_ / summary_.seconds;
  summary_.measured_bubble = bubble_sum_ / std::max<int64_t>(bubble_count_, 1);
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << "trained " << done << " steps in "
     << duration_text(summary_.seconds) << ": " << summary_.examples_per_s << " examples/s";
  if (task_.counts_tokens())
    os << ", " << std::setprecision(0) << summary_.tokens_per_s << " tokens/s";
  os << std::setprecision(3) << "; bubble fraction measured " << summary_.measured_bubble << ", "
     << schedule << " ideal " << summary_.ideal_bubble_formula << " " << summary_.ideal_bubble
     << " (K=" << devices
     << (devices < cells ? detail::concat(" devices, ", cells, " cells") : std::string())
     << ", M=" << c_.M << ")";
  if (summary_.skipped_steps > 0)
    os << "; " << summary_.skipped_steps << " steps skipped (not finite)";
  log_ << os.str() << "\n";
}

void RunLog::write_plot() {
  if (c_.plot.empty() || !root_) return;
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

}  // namespace gpipe::train
