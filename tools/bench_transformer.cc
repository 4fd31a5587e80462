// gpipe_bench transformer: W2 of shared/BENCHMARKS.md. One Adam training
// step of the 3+3-layer pre-LN Transformer (d 256, FFN 1024, 4 heads, vocab
// 8192, tied embedding), N = 32, source 32 / target 32 tokens, at each thread
// count: gpipe (Pipeline K = 1, M = 1) and PyTorch
// (benchmarks/transformer_torch.py step), each in a fresh process.
#include <cstdio>

#include "core/error.h"
#include "tools/bench_common.h"
#include "tools/benchmarks.h"

namespace gpipe::bench {

int run_transformer(const TransformerBenchOptions& opt) {
  const std::string python = opt.torch.python.empty() ? default_torch_python() : opt.torch.python;
  const double gflop = transformer_step_flops(3, 32, 32, 32, 256, 1024, 8192) / 1e9;
  std::printf("# W2 transformer step: 3+3 layers, d 256, FFN 1024, 4 heads, vocab 8192, N=32, src 32, tgt 32;\n"
              "# Adam(lr=1e-4); median of %d steps after %d warm-up (%.0f s max); %.1f GFLOP/step; %s\n",
              opt.steps, opt.warmup, opt.max_seconds, gflop, opt.torch.env_note.c_str());
  std::printf("%7s %12s %12s %7s %10s %10s %10s %10s\n", "threads", "gpipe tok/s", "torch tok/s", "ratio",
              "gpipe GF/s", "torch GF/s", "gpipe loss", "torch loss");
  std::string torch_version;
  for (int threads : opt.threads) {
    std::string ref;
    if (!opt.torch.skip) {
      ref = try_run_json(python_command(python, "transformer_torch.py", threads,
                                        "step --threads " + std::to_string(threads) + " --warmup " +
                                            std::to_string(opt.warmup) + " --steps " + std::to_string(opt.steps) +
                                            " --max-seconds " + std::to_string(opt.max_seconds)));
      if (!ref.empty()) torch_version = json_string(ref, "torch");
    }
    MeasureOptions m;
    m.workload = "transformer";
    m.layers = 3;
    m.batch = 32;
    m.threads = threads;
    m.warmup = opt.warmup;
    m.steps = opt.steps;
    m.max_seconds = opt.max_seconds;
    const std::string ours = measure_in_child(m);
    GPIPE_CHECK(json_number(ours, "params") == 7627776, "W2 model has ", json_number(ours, "params"),
                " parameters, expected 7,627,776");
    if (!ref.empty())
      GPIPE_CHECK(json_number(ref, "params") == 7627776, "PyTorch's W2 model has ", json_number(ref, "params"),
                  " parameters, expected 7,627,776");
    const double g_s = json_number(ours, "median_s");
    const double t_s = ref.empty() ? 0 : json_number(ref, "median_s");
    std::printf("%7d %12.0f %12.0f %7.2f %10.1f %10.1f %10.3f %10.3f\n", threads, 1024 / g_s, t_s > 0 ? 1024 / t_s : 0.0,
                t_s > 0 ? t_s / g_s : 0.0, gflop / g_s, t_s > 0 ? gflop / t_s : 0.0, json_number(ours, "loss_first"),
                ref.empty() ? 0.0 : json_number(ref, "loss_first"));
    std::fflush(stdout);
  }
  std::printf("# parameters: 7,627,776 on both sides (checked); ratio = torch step time / gpipe step time; goal >= 1.3\n");
  if (!torch_version.empty()) std::printf("# reference: torch %s (%s)\n", torch_version.c_str(), python.c_str());
  return 0;
}

}  // namespace gpipe::bench
