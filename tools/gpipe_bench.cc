// gpipe_bench: reproduces the workloads of shared/BENCHMARKS.md, each beside
// its reference in the same run.
//   bazel run //tools:gpipe_bench -- gemm [--sizes 512,1024] [--threads 1,2]
//   bazel run //tools:gpipe_bench -- transformer   # W2 vs PyTorch
//   bazel run //tools:gpipe_bench -- pipeline      # W3 K=1 vs K=2 (+ PyTorch seq)
//   bazel run //tools:gpipe_bench -- remat         # W4 activation memory
//   bazel run //tools:gpipe_bench -- amoebanet     # W5 vs PyTorch
// PyTorch comes from benchmarks/setup_torch.sh's virtualenv (--python to override).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "core/error.h"
#include "tools/bench_common.h"
#include "tools/benchmarks.h"

namespace {

void add_torch_flags(CLI::App* c, gpipe::bench::TorchSide& t) {
  c->add_option("--python", t.python,
                "python with torch for the reference (default: benchmarks/setup_torch.sh's venv, else /usr/bin/python3)");
  c->add_flag("--no-torch", t.skip, "skip the PyTorch reference");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string env_note = gpipe::bench::ensure_fair_openblas_env(argc, argv);
  CLI::App app{"gpipe_bench: gpipe beside its reference, one workload at a time"};
  app.require_subcommand(1);

  gpipe::bench::GemmBenchOptions gemm;
  gemm.env_note = env_note;
  CLI::App* g = app.add_subcommand("gemm", "W1: fp32 square GEMM vs numpy/OpenBLAS");
  g->add_option("--sizes", gemm.sizes, "matrix sizes n")->delimiter(',')->check(CLI::PositiveNumber);
  g->add_option("--threads", gemm.threads, "intra-op thread counts")->delimiter(',')->check(CLI::PositiveNumber);
  g->add_option("--min-seconds", gemm.min_seconds, "timing budget per measurement")->check(CLI::PositiveNumber);
  g->add_option("--python", gemm.python, "python with numpy for the reference");
  g->add_flag("--no-numpy", gemm.skip_numpy, "skip the numpy reference");

  gpipe::bench::TransformerBenchOptions tr;
  tr.torch.env_note = env_note;
  CLI::App* t = app.add_subcommand("transformer", "W2: 3+3 Transformer training step (N=32) vs PyTorch");
  t->add_option("--threads", tr.threads, "intra-op thread counts")->delimiter(',')->check(CLI::PositiveNumber);
  t->add_option("--warmup", tr.warmup, "untimed steps")->check(CLI::NonNegativeNumber);
  t->add_option("--steps", tr.steps, "timed steps (median reported)")->check(CLI::PositiveNumber);
  t->add_option("--max-seconds", tr.max_seconds, "stop timing after this long")->check(CLI::PositiveNumber);
  add_torch_flags(t, tr.torch);

  gpipe::bench::PipelineBenchOptions pl;
  pl.torch.env_note = env_note;
  CLI::App* p = app.add_subcommand("pipeline", "W3: 8+8 Transformer, K=1 (1 core) vs K=2 (1 core per stage)");
  p->add_option("--micro-batches", pl.micro_batches, "M values (full sweep: 1,4,8,16)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  p->add_option("--remat", pl.remat, "remat modes: never, except_last, always")->delimiter(',');
  p->add_option("--torch-threads", pl.torch_threads, "thread counts of PyTorch's seq baseline")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  p->add_option("--balance", pl.balance, "explicit K=2 split in layers, e.g. 12,7 (default: by cost)");
  p->add_option("--warmup", pl.warmup, "untimed steps")->check(CLI::NonNegativeNumber);
  p->add_option("--steps", pl.steps, "timed steps (median reported)")->check(CLI::PositiveNumber);
  p->add_flag("!--no-pipe", pl.try_pipe, "do not try torch.distributed.pipeline.sync.Pipe");
  add_torch_flags(p, pl.torch);

  gpipe::bench::RematBenchOptions rm;
  rm.torch.env_note = env_note;
  CLI::App* r = app.add_subcommand("remat", "W4: activation memory and step time with / without remat");
  r->add_option("--partitions", rm.partitions, "K values (1 or 2)")->delimiter(',')->check(CLI::Range(1, 2));
  r->add_option("--micro-batches", rm.micro_batches, "M values")->delimiter(',')->check(CLI::PositiveNumber);
  r->add_option("--remat", rm.remat, "remat modes: never, except_last, always")->delimiter(',');
  r->add_option("--warmup", rm.warmup, "untimed steps")->check(CLI::NonNegativeNumber);
  r->add_option("--steps", rm.steps, "timed steps (median reported)")->check(CLI::PositiveNumber);
  add_torch_flags(r, rm.torch);

  gpipe::bench::AmoebaNetBenchOptions am;
  am.torch.env_note = env_note;
  CLI::App* a = app.add_subcommand("amoebanet", "W5: AmoebaNet-D(2,32) training step (N=64, 32x32) vs PyTorch");
  a->add_option("--threads", am.threads, "intra-op thread counts")->delimiter(',')->check(CLI::PositiveNumber);
  a->add_flag("--torchgpipe-maxpool", am.quirk_maxpool, "both sides: torchgpipe's AvgPool for max_pool_3x3");
  a->add_option("--warmup", am.warmup, "untimed steps")->check(CLI::NonNegativeNumber);
  a->add_option("--steps", am.steps, "timed steps (median reported)")->check(CLI::PositiveNumber);
  a->add_option("--max-seconds", am.max_seconds, "stop timing after this long")->check(CLI::PositiveNumber);
  add_torch_flags(a, am.torch);

  // One gpipe measurement in this process (the subcommands above run it in a
  // fresh process per measurement); prints one JSON line.
  gpipe::bench::MeasureOptions me;
  CLI::App* m = app.add_subcommand("measure", "one gpipe measurement, JSON on stdout (used by the others)");
  m->group("");  // hidden from --help
  m->add_option("--workload", me.workload, "transformer | amoebanet");
  m->add_option("--layers", me.layers, "transformer: layers per side; amoebanet: N");
  m->add_option("--batch", me.batch, "N");
  m->add_option("--threads", me.threads, "intra-op threads per stage");
  m->add_option("--partitions", me.partitions, "K");
  m->add_option("--micro-batches", me.micro_batches, "M");
  m->add_option("--remat", me.remat, "never | except_last | always");
  m->add_option("--balance", me.balance, "layers per cell");
  m->add_option("--warmup", me.warmup, "untimed steps");
  m->add_option("--steps", me.steps, "timed steps");
  m->add_option("--max-seconds", me.max_seconds, "timing budget");
  m->add_flag("--torchgpipe-maxpool", me.quirk_maxpool, "amoebanet: AvgPool for max_pool_3x3");
  m->add_option("--trace", me.trace_path, "Chrome trace of the timed steps (measured bubble in the JSON)");

  CLI11_PARSE(app, argc, argv);
  try {
    if (g->parsed()) return gpipe::bench::run_gemm(gemm);
    if (t->parsed()) return gpipe::bench::run_transformer(tr);
    if (p->parsed()) return gpipe::bench::run_pipeline(pl);
    if (r->parsed()) return gpipe::bench::run_remat(rm);
    if (a->parsed()) return gpipe::bench::run_amoebanet(am);
    if (m->parsed()) return gpipe::bench::run_measure(me);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpipe_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
