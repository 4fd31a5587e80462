// gpipe_bench: reproduces the workloads of shared/BENCHMARKS.md, each beside
// its reference in the same run.
//   bazel run //tools:gpipe_bench -- gemm [--sizes 512,1024] [--threads 1,2]   # W1
//   (GPIPE_CPU_ISA=avx2 for that path) bazel run //tools:gpipe_bench -- peak          # FMA peak
//   per ISA level, 1 and 2 threads bazel run //tools:gpipe_bench -- transformer   # W2 vs PyTorch
//   bazel run //tools:gpipe_bench -- pipeline      # W3 K=1 vs K=2 (+ PyTorch seq)
//   bazel run //tools:gpipe_bench -- schedules     # W3 at K (2) per schedule: bubble vs formula
//   bazel run //tools:gpipe_bench -- remat         # W4 activation memory
//   bazel run //tools:gpipe_bench -- amoebanet     # W5 vs PyTorch
//   bazel run //tools:gpipe_bench -- processes     # W3 over MPI ranks vs in-process; R=2 data
//   parallel
//   bazel run //tools:gpipe_bench -- profile [--threads 2] [--precision bf16]  # W2's step per
//   kernel: time, share, bytes, bandwidth against the measured (peak prints the bandwidth too)
//   bazel run //tools:gpipe_bench -- data          # loaders (JPEG folder, token shard) vs a
//   training step's appetite
// PyTorch comes from benchmarks/setup_torch.sh's virtualenv (--python to override).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "ops/cpu/blas.h"
#include "tools/bench/benchmarks.h"
#include "tools/bench/cli.h"
#include "tools/bench/common.h"
#include "tools/train/cli_checks.h"
#include "tools/train/version.h"

namespace {

// The flags most workloads share.
void add_thread_counts(CLI::App* c, std::vector<int>& threads) {
  c->add_option("--threads", threads, "intra-op thread counts")
      ->delimiter(',')
      ->check(gpipe::train::kPositive);
}

void add_warmup_steps(CLI::App* c, int& warmup, int& steps,
                      const char* steps_text = "timed steps (median reported)") {
  c->add_option("--warmup", warmup, "untimed steps")->check(gpipe::train::kNonNegative);
  c->add_option("--steps", steps, steps_text)->check(gpipe::train::kPositive);
}

void add_max_seconds(CLI::App* c, double& max_seconds) {
  c->add_option("--max-seconds", max_seconds, "stop timing after this long")
      ->check(gpipe::train::kPositive);
}

// Rounds of both sides per thread count (Note [Rounds against noise] in tools/bench/compare.cc).
void add_rounds(CLI::App* c, int& rounds) {
  c->add_option("--rounds", rounds,
                "rounds per thread count, each: the FMA peak, then both sides in alternating "
                "order, a row each (and a summary of the rounds)")
      ->check(gpipe::train::kPositive);
}

void add_torch_flags(CLI::App* c, gpipe::bench::TorchSide& t) {
  c->add_option("--python", t.python,
                "python with torch for the reference (default: benchmarks/setup_torch.sh's venv, "
                "else /usr/bin/python3)");
  c->add_flag("--no-torch", t.skip, "skip the PyTorch reference");
}

CLI::App* add_gemm(CLI::App& app, gpipe::bench::GemmBenchOptions& o) {
  CLI::App* c = app.add_subcommand("gemm",
                                   "W1: fp32 GEMM, square and Transformer shapes: packed (active "
                                   "ISA) vs OpenBLAS, Eigen, numpy");
  c->add_option("--sizes", o.sizes, "square matrix sizes n")
      ->delimiter(',')
      ->check(gpipe::train::kPositive);
  add_thread_counts(c, o.threads);
  c->add_option("--min-seconds", o.min_seconds, "timing budget per square measurement")
      ->check(gpipe::train::kPositive);
  c->add_option("--python", o.python, "python with numpy for the reference");
  c->add_flag("--no-numpy", o.skip_numpy, "skip the numpy reference");
  c->add_flag("--no-torch", o.skip_torch, "skip the torch.mm reference");
  c->add_flag("--no-square", o.skip_square, "skip the square sizes");
  c->add_flag("--no-transformer", o.skip_transformer, "skip the Transformer shapes");
  c->add_flag("--sweep-blocking", o.sweep_blocking,
              "only measure the cache blocking: the model's kc, nc against a grid around it, "
              "float32 and bfloat16, square --sizes at the first --threads count");
  c->add_flag("--no-bf16", o.skip_bf16,
              "skip the bfloat16 section (square and Transformer shapes, torch.mm in bfloat16)");
  c->add_option("--tokens", o.tokens, "FFN shapes: tokens (rows)")->check(gpipe::train::kPositive);
  c->add_option("--dim", o.dim, "FFN shapes: model width d (hidden 4d)")
      ->check(gpipe::train::kPositive);
  c->add_option("--vocab", o.vocab, "output projection widths")
      ->delimiter(',')
      ->check(gpipe::train::kPositive);
  c->add_option("--vocab-tokens", o.vocab_tokens, "output projection: tokens")
      ->check(gpipe::train::kPositive);
  c->add_option("--vocab-dim", o.vocab_dim, "output projection: d")->check(gpipe::train::kPositive);
  c->add_option("--shape-min-seconds", o.shape_min_seconds,
                "timing budget per Transformer-shape measurement")
      ->check(gpipe::train::kPositive);
  c->add_flag("--cold", o.cold,
              "Transformer shapes: also the packed GEMM's median with its operands out of the "
              "caches (every core sweeps 64 MiB before each product), as a training step finds "
              "them");
  return c;
}

CLI::App* add_peak(CLI::App& app, gpipe::bench::PeakBenchOptions& o) {
  CLI::App* c = app.add_subcommand("peak", "fp32 FMA peak GFLOP/s of each ISA level the CPU has");
  add_thread_counts(c, o.threads);
  c->add_option("--seconds", o.seconds, "time per measurement")->check(gpipe::train::kPositive);
  return c;
}

CLI::App* add_profile(CLI::App& app, gpipe::bench::ProfileBenchOptions& o) {
  CLI::App* c = app.add_subcommand(
      "profile", "a training step per kernel: time, share, bytes, bandwidth against the measured");
  c->add_option("--workload", o.workload, "transformer | amoebanet | unet | resnet");
  c->add_option(
       "--layers", o.layers,
       "transformer: layers per side; amoebanet: N; unet, resnet: depth (default 3; resnet 50)")
      ->check(gpipe::train::kPositive);
  c->add_option("--batch", o.batch, "N")->check(gpipe::train::kPositive);
  c->add_option("--threads", o.threads, "intra-op threads")->check(gpipe::train::kPositive);
  c->add_option("--precision", o.precision, "fp32 | bf16 | fp16");
  c->add_flag("--unfused-loss", o.unfused_loss,
              "transformer: the output projection's logits, then the loss (not fused)");
  c->add_option("--dropout", o.dropout, "transformer: training dropout")
      ->check(gpipe::train::kProbability);
  add_warmup_steps(c, o.warmup, o.steps, "profiled steps");
  return c;
}

CLI::App* add_kernels(CLI::App& app, gpipe::bench::KernelsBenchOptions& o) {
  CLI::App* c = app.add_subcommand(
      "kernels", "kernel lab: hot CPU kernels at W2/W3/W5 shapes, per ISA level, vs reference");
  add_thread_counts(c, o.threads);
  c->add_option("--seconds", o.seconds, "timing budget per kernel and level")
      ->check(gpipe::train::kPositive);
  c->add_option("--filter", o.filter, "only kernels whose name contains this text");
  return c;
}

CLI::App* add_transformer(CLI::App& app, gpipe::bench::TransformerBenchOptions& o) {
  CLI::App* c =
      app.add_subcommand("transformer", "W2: 3+3 Transformer training step (N=32) vs PyTorch");
  add_thread_counts(c, o.threads);
  add_warmup_steps(c, o.warmup, o.steps);
  add_max_seconds(c, o.max_seconds);
  c->add_option("--precision", o.precision,
                "fp32 | bf16 (gpipe's bf16 against PyTorch's CPU autocast)")
      ->capture_default_str();
  c->add_flag("--unfused-loss", o.unfused_loss,
              "gpipe's output projection's logits, then the loss (not fused)");
  c->add_option("--dropout", o.dropout,
                "training dropout on both sides (embeddings, attention probabilities, the FFN's "
                "hidden layer, each sublayer's output)")
      ->check(gpipe::train::kProbability);
  add_rounds(c, o.rounds);
  add_torch_flags(c, o.torch);
  return c;
}

CLI::App* add_lm(CLI::App& app, gpipe::bench::LmBenchOptions& o) {
  CLI::App* c = app.add_subcommand(
      "lm", "GPT-2-small- / Llama-shaped language-model training step vs PyTorch");
  c->add_option("--arch", o.arch, "gpt2 | llama")->capture_default_str();
  add_thread_counts(c, o.threads);
  c->add_option("--layers", o.layers, "blocks")->capture_default_str();
  c->add_option("--batch", o.batch, "N: sequences per step")->capture_default_str();
  c->add_option("--context", o.context, "T: tokens per sequence")->capture_default_str();
  c->add_option("--vocab", o.vocab, "vocabulary (0: the architecture's, 50257 / 32000)")
      ->capture_default_str();
  c->add_option("--precision", o.precision, "fp32 | bf16 (against PyTorch's CPU autocast)")
      ->capture_default_str();
  add_warmup_steps(c, o.warmup, o.steps);
  add_max_seconds(c, o.max_seconds);
  add_rounds(c, o.rounds);
  add_torch_flags(c, o.torch);
  return c;
}

CLI::App* add_pipeline(CLI::App& app, gpipe::bench::PipelineBenchOptions& o) {
  CLI::App* c =
      app.add_subcommand("pipeline", "W3: 8+8 Transformer, K=1 (1 core) vs K=2 (1 core per stage)");
  gpipe::train::add_renamed_flag(c, "--micro-batches", "--M");
  c->add_option("--M", o.M, "M values (full sweep: 1,4,8,16)")
      ->delimiter(',')
      ->check(gpipe::train::kPositive);
  c->add_option("--remat", o.remat, "remat modes: never, except_last, always")->delimiter(',');
  c->add_option("--schedule", o.schedules, "schedules: gpipe, 1f1b")->delimiter(',');
  c->add_option("--torch-threads", o.torch_threads, "thread counts of PyTorch's seq baseline")
      ->delimiter(',')
      ->check(gpipe::train::kPositive);
  c->add_option("--balance", o.balance,
                "explicit K=2 split in layers, e.g. 12,7 (default: by cost)");
  add_warmup_steps(c, o.warmup, o.steps);
  c->add_flag("!--no-pipe", o.try_pipe, "do not try torch.distributed.pipeline.sync.Pipe");
  add_torch_flags(c, o.torch);
  return c;
}

CLI::App* add_schedules(CLI::App& app, gpipe::bench::SchedulesBenchOptions& o) {
  CLI::App* c = app.add_subcommand(
      "schedules",
      "W3's model at K devices under each schedule: bubble vs formula and the simulator's "
      "prediction, gain over 1F1B");
  gpipe::train::add_renamed_flag(c, "--micro-batches", "--M");
  c->add_option("--K", o.K, "devices, one thread each (more devices than cores share them)")
      ->check(gpipe::train::int_range(1, 16));
  c->add_option("--M", o.M, "M values")->delimiter(',')->check(gpipe::train::kPositive);
  c->add_option("--schedule", o.schedules,
                "schedules: gpipe, 1f1b, interleaved, zb-h1, zb-h1-lowmem, zb-v, zb-interleaved, "
                "v-half, v-min, dualpipev, looped-bfs")
      ->delimiter(',');
  c->add_option("--virtual", o.virtual_stages, "v for interleaved, zb-interleaved, looped-bfs")
      ->check(CLI::Range(2, 8));
  c->add_option("--remat", o.remat, "never | except_last | always");
  add_warmup_steps(c, o.warmup, o.steps);
  c->add_option("--trace-dir", o.trace_dir, "write each run's Chrome trace and SVG here");
  c->add_option("--slow-link-us", o.slow_link_us,
                "slowed-link mode: each hand-over between devices this many microseconds late; "
                "each schedule at each --slow-K with the free-link order and the measured one")
      ->check(gpipe::train::kPositive);
  c->add_option("--slow-K", o.slow_K, "K values of the slowed-link mode")
      ->delimiter(',')
      ->check(gpipe::train::int_range(2, 16));
  c->add_option("--slow-layers", o.slow_layers, "slowed-link mode: Transformer layers per side")
      ->check(gpipe::train::kPositive);
  c->add_option("--slow-batch", o.slow_batch, "slowed-link mode: N")
      ->check(gpipe::train::kPositive);
  return c;
}

CLI::App* add_remat(CLI::App& app, gpipe::bench::RematBenchOptions& o) {
  CLI::App* c =
      app.add_subcommand("remat", "W4: activation memory and step time with / without remat");
  c->add_option("--schedule", o.schedules, "schedules: gpipe, 1f1b (1f1b rows at K, M > 1)")
      ->delimiter(',')
      ->check(CLI::IsMember({"gpipe", "1f1b"}));
  gpipe::train::add_renamed_flag(c, "--partitions", "--K");
  c->add_option("--K", o.K, "K values (1 or 2)")->delimiter(',')->check(CLI::Range(1, 2));
  gpipe::train::add_renamed_flag(c, "--micro-batches", "--M");
  c->add_option("--M", o.M, "M values")->delimiter(',')->check(gpipe::train::kPositive);
  c->add_option("--remat", o.remat, "remat modes: never, except_last, always")->delimiter(',');
  add_warmup_steps(c, o.warmup, o.steps);
  add_torch_flags(c, o.torch);
  return c;
}

CLI::App* add_amoebanet(CLI::App& app, gpipe::bench::AmoebaNetBenchOptions& o) {
  CLI::App* c = app.add_subcommand("amoebanet",
                                   "W5: AmoebaNet-D(2,32) training step (N=64, 32x32) vs PyTorch");
  add_thread_counts(c, o.threads);
  c->add_flag("--torchgpipe-maxpool", o.quirk_maxpool,
              "both sides: torchgpipe's AvgPool for max_pool_3x3");
  add_warmup_steps(c, o.warmup, o.steps);
  add_max_seconds(c, o.max_seconds);
  add_rounds(c, o.rounds);
  add_torch_flags(c, o.torch);
  return c;
}

CLI::App* add_processes(CLI::App& app, gpipe::bench::ProcessesBenchOptions& o) {
  CLI::App* c = app.add_subcommand("processes",
                                   "W3 with one MPI rank per stage vs in-process K=2; R=2 data "
                                   "parallel vs one process; bytes sent");
  gpipe::train::add_renamed_flag(c, "--micro-batches", "--M");
  c->add_option("--M", o.M, "M values")->delimiter(',')->check(gpipe::train::kPositive);
  c->add_option("--remat", o.remat, "never | except_last | always");
  add_warmup_steps(c, o.warmup, o.steps);
  c->add_option("--rounds", o.rounds, "alternate the variants this many times")
      ->check(gpipe::train::kPositive);
  c->add_option("--mpirun", o.mpirun, "the MPI launcher");
  return c;
}

CLI::App* add_skips(CLI::App& app, gpipe::bench::SkipsBenchOptions& o) {
  CLI::App* c = app.add_subcommand(
      "skips", "U-Net at K=2 and 4: skips sent directly vs through the cells between");
  c->add_option("--depth", o.depth, "B")->check(CLI::Range(1, 5));
  c->add_option("--channels", o.channels, "C (even)")->check(gpipe::train::kPositive);
  c->add_option("--convs", o.convs, "conv units per block")->check(gpipe::train::kPositive);
  c->add_option("--batch", o.batch, "N")->check(gpipe::train::kPositive);
  gpipe::train::add_renamed_flag(c, "--micro-batches", "--M");
  c->add_option("--M", o.M, "M")->check(gpipe::train::kPositive);
  gpipe::train::add_renamed_flag(c, "--partitions", "--K");
  c->add_option("--K", o.K, "K values")->delimiter(',')->check(CLI::Range(2, 12));
  c->add_option("--threads", o.threads, "intra-op threads per stage")
      ->check(gpipe::train::kPositive);
  add_warmup_steps(c, o.warmup, o.steps);
  add_max_seconds(c, o.max_seconds);
  return c;
}

CLI::App* add_data(CLI::App& app, gpipe::bench::DataBenchOptions& o) {
  CLI::App* c = app.add_subcommand(
      "data", "loaders: examples/s of a JPEG folder and a token shard vs a training step's");
  c->add_option("--image-size", o.sizes, "image sizes")->delimiter(',');
  c->add_option("--images", o.images, "JPEGs generated per size")->check(gpipe::train::kPositive);
  c->add_option("--batch", o.batch, "image batch")->check(gpipe::train::kPositive);
  c->add_option("--seconds", o.seconds, "loader timing per path")->check(gpipe::train::kPositive);
  c->add_option("--threads", o.threads, "the step's threads")->check(gpipe::train::kPositive);
  c->add_option("--steps", o.steps, "timed steps")->check(gpipe::train::kPositive);
  return c;
}

CLI::App* add_resnet(CLI::App& app, gpipe::bench::ResNetBenchOptions& o) {
  CLI::App* c = app.add_subcommand(
      "resnet", "ResNet-101 on 32x32: K=2 M=8 vs K=1 (against 2M/(M+1)) and vs PyTorch");
  c->add_option("--depth", o.depth, "50, 101 or 152")->check(CLI::IsMember({50, 101, 152}));
  c->add_option("--width", o.width, "W (torchvision: 64)")->check(gpipe::train::kPositive);
  c->add_option("--batch", o.batch, "N")->check(gpipe::train::kPositive);
  gpipe::train::add_renamed_flag(c, "--micro-batches", "--M");
  c->add_option("--M", o.M, "M of the K=2 run")->check(gpipe::train::kPositive);
  add_warmup_steps(c, o.warmup, o.steps);
  add_max_seconds(c, o.max_seconds);
  add_torch_flags(c, o.torch);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  if (gpipe::print_version_if_asked(argc, argv, "gpipe_bench")) return 0;
  const std::string env_note = gpipe::bench::ensure_fair_openblas_env(argc, argv);
  CLI::App app{"gpipe_bench: gpipe beside its reference, one workload at a time"};
  app.require_subcommand(1);

  gpipe::bench::GemmBenchOptions gemm;
  gpipe::bench::PeakBenchOptions peak;
  gpipe::bench::KernelsBenchOptions kn;
  gpipe::bench::TransformerBenchOptions tr;
  gpipe::bench::LmBenchOptions lmo;
  gpipe::bench::PipelineBenchOptions pl;
  gpipe::bench::SchedulesBenchOptions sc;
  gpipe::bench::RematBenchOptions rm;
  gpipe::bench::AmoebaNetBenchOptions am;
  gpipe::bench::MeasureOptions me;
  gpipe::bench::ProcessesBenchOptions pr;
  gpipe::bench::SkipsBenchOptions sk;
  gpipe::bench::ResNetBenchOptions rn;
  gpipe::bench::ProfileBenchOptions pf;
  gpipe::bench::DataBenchOptions db;
  pf.env_note = env_note;
  gemm.env_note = peak.env_note = kn.env_note = tr.torch.env_note = pl.torch.env_note =
      rm.torch.env_note = lmo.torch.env_note = am.torch.env_note = rn.torch.env_note = env_note;
  CLI::App* g = add_gemm(app, gemm);
  CLI::App* pk = add_peak(app, peak);
  CLI::App* kl = add_kernels(app, kn);
  CLI::App* t = add_transformer(app, tr);
  CLI::App* lmc = add_lm(app, lmo);
  CLI::App* p = add_pipeline(app, pl);
  CLI::App* sch = add_schedules(app, sc);
  CLI::App* r = add_remat(app, rm);
  CLI::App* a = add_amoebanet(app, am);
  CLI::App* m = gpipe::bench::add_measure(app, me);
  CLI::App* pc = add_processes(app, pr);
  CLI::App* skc = add_skips(app, sk);
  CLI::App* rnc = add_resnet(app, rn);
  CLI::App* pfc = add_profile(app, pf);
  CLI::App* dbc = add_data(app, db);

  CLI11_PARSE(app, argc, argv);
  try {
    // Every result names the CPU, the kernels' ISA level and the GEMM path
    // (measure prints only its JSON line: its parent prints this).
    if (!m->parsed())
      std::printf("# compute: %s\n", gpipe::ops::cpu::compute_description().c_str());
    if (g->parsed()) return gpipe::bench::run_gemm(gemm);
    if (pk->parsed()) return gpipe::bench::run_peak(peak);
    if (kl->parsed()) return gpipe::bench::run_kernels(kn);
    if (t->parsed()) return gpipe::bench::run_transformer(tr);
    if (lmc->parsed()) return gpipe::bench::run_lm(lmo);
    if (p->parsed()) return gpipe::bench::run_pipeline(pl);
    if (sch->parsed()) return gpipe::bench::run_schedules(sc);
    if (r->parsed()) return gpipe::bench::run_remat(rm);
    if (a->parsed()) return gpipe::bench::run_amoebanet(am);
    if (m->parsed()) return gpipe::bench::run_measure(me);
    if (pc->parsed()) return gpipe::bench::run_processes(pr);
    if (skc->parsed()) return gpipe::bench::run_skips(sk);
    if (rnc->parsed()) return gpipe::bench::run_resnet(rn);
    if (pfc->parsed()) return gpipe::bench::run_profile(pf);
    if (dbc->parsed()) return gpipe::bench::run_data(db);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpipe_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
