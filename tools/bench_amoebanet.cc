// gpipe_bench amoebanet: W5 of shared/BENCHMARKS.md. One SGD (momentum 0.9)
// training step of AmoebaNet-D(2, 32) on 64 random 3x32x32 images, at each
// thread count: gpipe (Pipeline K = 1, M = 1) and PyTorch
// (benchmarks/amoebanet_torch.py), each in a fresh process. Both sides use
// real 3x3 max pooling (gpipe's default; the script's --true-maxpool) unless
// --torchgpipe-maxpool asks both for torchgpipe's AvgPool quirk.
#include <cstdio>

#include "core/error.h"
#include "tools/bench_common.h"
#include "tools/benchmarks.h"

namespace gpipe::bench {

int run_amoebanet(const AmoebaNetBenchOptions& opt) {
  const std::string python = opt.torch.python.empty() ? default_torch_python() : opt.torch.python;
  const double gflop = 3 * 4.37e6 * 64 / 1e9;
  std::printf("# W5 AmoebaNet-D(2,32): N=64, 3x32x32, SGD(lr=0.01, momentum=0.9), max_pool_3x3 = %s;\n"
              "# median of %d steps after %d warm-up (%.0f s max); %s\n",
              opt.quirk_maxpool ? "AvgPool (torchgpipe quirk)" : "MaxPool", opt.steps, opt.warmup, opt.max_seconds,
              opt.torch.env_note.c_str());
  std::printf("%7s %12s %12s %7s %10s %10s %10s %10s\n", "threads", "gpipe img/s", "torch img/s", "ratio",
              "gpipe GF/s", "torch GF/s", "gpipe loss", "torch loss");
  std::string torch_version;
  for (int threads : opt.threads) {
    std::string ref;
    if (!opt.torch.skip) {
      ref = try_run_json(python_command(python, "amoebanet_torch.py", threads,
                                        "--threads " + std::to_string(threads) + " --warmup " +
                                            std::to_string(opt.warmup) + " --steps " + std::to_string(opt.steps) +
                                            " --max-seconds " + std::to_string(opt.max_seconds) +
                                            (opt.quirk_maxpool ? "" : " --true-maxpool")));
      if (!ref.empty()) torch_version = json_string(ref, "torch");
    }
    MeasureOptions m;
    m.workload = "amoebanet";
    m.layers = 2;
    m.batch = 64;
    m.threads = threads;
    m.warmup = opt.warmup;
    m.steps = opt.steps;
    m.max_seconds = opt.max_seconds;
    m.quirk_maxpool = opt.quirk_maxpool;
    const std::string ours = measure_in_child(m);
    GPIPE_CHECK(json_number(ours, "params") == 679578, "W5 model has ", json_number(ours, "params"),
                " parameters, expected 679,578");
    if (!ref.empty())
      GPIPE_CHECK(json_number(ref, "params") == 679578, "PyTorch's W5 model has ", json_number(ref, "params"),
                  " parameters, expected 679,578");
    const double g_s = json_number(ours, "median_s");
    const double t_s = ref.empty() ? 0 : json_number(ref, "median_s");
    std::printf("%7d %12.0f %12.0f %7.2f %10.2f %10.2f %10.3f %10.3f\n", threads, 64 / g_s, t_s > 0 ? 64 / t_s : 0.0,
                t_s > 0 ? t_s / g_s : 0.0, gflop / g_s, t_s > 0 ? gflop / t_s : 0.0, json_number(ours, "loss_first"),
                ref.empty() ? 0.0 : json_number(ref, "loss_first"));
    std::fflush(stdout);
  }
  std::printf("# parameters: 679,578 on both sides (checked); ratio = torch step time / gpipe step time; goal >= 1.3\n");
  if (!torch_version.empty()) std::printf("# reference: torch %s (%s)\n", torch_version.c_str(), python.c_str());
  return 0;
}

}  // namespace gpipe::bench
