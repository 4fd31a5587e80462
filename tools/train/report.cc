// gpipe_train's printed reports (tools/train/report.h).
#include "tools/train/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "pipeline/schedule.h"
#include "pipeline/simulate.h"
#include "runtime/trace.h"

namespace gpipe::train {

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0 && s[i - 1] != '-') out += ',';
    out += s[i];
  }
  return out;
}

std::string duration_text(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm", static_cast<long>(s / 3600),
                  static_cast<long>(s / 60 % 60));
  else if (s >= 60)
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", static_cast<long>(s / 60),
                  static_cast<long>(s % 60));
  else
    std::snprintf(buf, sizeof(buf), "%lds", static_cast<long>(s));
  return buf;
}

std::map<std::string, std::string> run_metadata(const TrainConfig& c, const Task& task) {
  std::map<std::string, std::string> m = task.metadata();
  m["train.model"] = c.model;
  m["train.seed"] = std::to_string(c.seed);
  m["train.batch"] = std::to_string(c.batch);
  // K, R and the rank layout do not change the arithmetic; the job's R x M micro-batches do.
  m["train.micro_batches"] = std::to_string(c.replicas * c.M);
  m["train.optimizer"] = c.optimizer;
  m["train.lr_schedule"] = detail::concat(c.lr_schedule, " lr=", *c.lr);
  m["train.steps"] = std::to_string(c.steps);
  m["train.precision"] = c.precision;
  return m;
}

// The program in its text form (loadable with --schedule=file:PATH), then
// the dry run as comments.
void print_schedule(const TrainConfig& c, std::ostream& log) {
  const ResolvedOptions resolved = c.pipeline ? *c.pipeline : resolve_pipeline(c);
  const Schedule& s = *resolved.program;
  const DryRun& run = resolved.dry_run;
  log << to_text(s);
  log << "# dry run: " << run.makespan
      << " ticks (one per forward, recompute or backward); peak live micro-batches per stage:";
  for (int p : run.peak_live) log << " " << p;
  log << "\n";
  // The simulator (pipeline/simulate.h) on uniform stages: the shape of the step.
  // Interleaved: each of a device's v cells holds 1/v of its work.
  const double per_cell = static_cast<double>(s.device_count()) / s.cells();
  const Simulation sim = simulate(s, CostModel::uniform(s.cells(), per_cell, 2.0 * per_cell));
  log << "# on uniform stages (F = 1, B = I + W = 2, R = 1, free links): " << sim.step_seconds
      << " units, bubble " << sim.bubble_fraction;
  if (c.schedule.rfind("file:", 0) != 0) {
    const BubbleFormula f = bubble_formula(parse_schedule(c.schedule), c.K, c.M, c.virtual_stages);
    log << " (" << c.schedule << "'s formula " << f.text << " = " << f.value << ")";
  }
  log << "\n";
  std::istringstream rows(
      render_timeline(sim, std::min(120, static_cast<int>(4 * sim.step_seconds))));
  for (std::string row; std::getline(rows, row);) log << "# " << row << "\n";
  if (!c.schedule_svg.empty()) {
    std::vector<std::string> names;
    for (int st = 0; st < sim.devices(); ++st)
      names.push_back((s.device_count() < s.cells() ? "device " : "stage ") + std::to_string(st));
    std::ofstream out(c.schedule_svg);
    out << timeline_svg(timeline_events(sim), names, "units (F = 1, B = I + W = 2)");
    GPIPE_CHECK(out.good(), "--schedule-svg: cannot write '", c.schedule_svg, "'");
    log << "# wrote the planned timeline to " << c.schedule_svg << "\n";
  }
}

int64_t print_parameter_count(const TrainConfig& c, std::ostream& log) {
  int64_t count = 0;
  if (c.model == "transformer") {
    const models::TransformerConfig t = transformer_config(c, /*paper_vocab=*/true);
    count = models::transformer_parameter_count(t);
    log << (c.preset.empty() ? "Transformer" : c.preset) << ": L=" << t.layers << " H=" << t.ffn
        << " A=" << t.heads << " dim=" << t.dim << " vocab=" << t.vocab << ": "
        << with_commas(count) << " parameters\n";
    if (!c.preset.empty()) {
      const int64_t ours = models::transformer_parameter_count(transformer_config(c));
      log << "  (with this run's byte vocabulary of " << transformer_config(c).vocab << ": "
          << with_commas(ours) << ")\n";
    }
  } else if (lm_model(c.model)) {
    // A preset's own vocabulary (Hugging Face's count), then this run's.
    const models::LmConfig own =
        c.preset.empty() ? lm_model_config(c) : models::lm_preset(c.preset);
    count = models::lm_parameter_count(own);
    log << (c.preset.empty() ? c.model : c.preset) << ": L=" << own.layers << " d=" << own.dim
        << " heads=" << own.heads << " kv-heads=" << own.kv() << " ffn=" << own.ffn
        << " vocab=" << own.vocab << " context=" << own.context
        << (own.tied ? " (tied output)" : "") << ": " << with_commas(count) << " parameters\n";
    if (!c.preset.empty() && c.vocab == 0) {
      const int64_t ours = models::lm_parameter_count(lm_model_config(c));
      log << "  (with this run's " << c.tokenizer << " vocabulary of " << lm_model_config(c).vocab
          << ": " << with_commas(ours) << ")\n";
    }
  } else {
    count = parameter_count(c);
    log << model_title(c) << ", 1 input channel, "
        << (c.model == "unet" ? "2 classes per pixel" : "10 classes") << ": " << with_commas(count)
        << " parameters\n";
  }
  return count;
}

}  // namespace gpipe::train
