// The hidden `measure` subcommand every tool that measures in a fresh
// process of itself registers (gpipe_bench, gpipe_plan --validate):
// measure_in_child runs "<this executable> measure ...".
#pragma once

#include <CLI/CLI.hpp>

#include "tools/bench/benchmarks.h"
#include "tools/train/cli_checks.h"

namespace gpipe::bench {

// One gpipe measurement in this process (the subcommands above run it in a
// fresh process per measurement); prints one JSON line.
inline CLI::App* add_measure(CLI::App& app, MeasureOptions& o) {
  CLI::App* c =
      app.add_subcommand("measure", "one gpipe measurement, JSON on stdout (used by the others)");
  c->group("");  // hidden from --help
  c->add_option("--workload", o.workload, "transformer | amoebanet | unet | resnet | gpt2 | llama");
  c->add_option("--context", o.context, "gpt2, llama: tokens per sequence");
  c->add_option("--vocab", o.vocab, "gpt2, llama: vocabulary (0: the architecture's)");
  c->add_option(
      "--layers", o.layers,
      "transformer: layers per side; amoebanet: N; unet, resnet: depth (default 3; resnet 50)");
  c->add_option("--batch", o.batch, "N");
  c->add_option("--threads", o.threads, "intra-op threads per stage");
  gpipe::train::add_renamed_flag(c, "--partitions", "--K");
  c->add_option("--K", o.K, "K");
  gpipe::train::add_renamed_flag(c, "--micro-batches", "--M");
  c->add_option("--M", o.M, "M");
  c->add_option("--remat", o.remat, "never | except_last | always");
  c->add_option("--schedule", o.schedule,
                "gpipe | 1f1b | zb-h1 | zb-h1-lowmem | interleaved | zb-v");
  c->add_option("--virtual", o.virtual_stages, "v: cells per device (interleaved)");
  c->add_option("--balance", o.balance, "layers per cell");
  c->add_option("--warmup", o.warmup, "untimed steps");
  c->add_option("--steps", o.steps, "timed steps");
  c->add_option("--max-seconds", o.max_seconds, "timing budget");
  c->add_flag("--torchgpipe-maxpool", o.quirk_maxpool, "amoebanet: AvgPool for max_pool_3x3");
  c->add_option("--trace", o.trace_path,
                "Chrome trace of the timed steps (measured bubble in the JSON)");
  c->add_option("--replicas", o.replicas, "R (under mpirun: K x R ranks)");
  c->add_option("--width", o.width, "unet: C; resnet: W");
  c->add_option("--convs", o.convs, "unet: conv units per block");
  c->add_flag("--split-blocks", o.split_blocks, "resnet: three layers per block");
  c->add_option("--skips", o.skips, "direct | through-cells");
  c->add_option("--precision", o.precision, "fp32 | bf16 | fp16");
  c->add_flag("--unfused-loss", o.unfused_loss, "transformer: logits, then the loss");
  c->add_option("--dropout", o.dropout, "transformer: training dropout")
      ->check(gpipe::train::kProbability);
  c->add_option("--link-delay-us", o.link_delay_us,
                "every hand-over between devices arrives this many microseconds late");
  c->add_option("--order-latency", o.order_latency,
                "hop latency in a cell's forwards the cost-built orders are placed for; "
                "-1: measured at start-up");
  return c;
}

}  // namespace gpipe::bench
