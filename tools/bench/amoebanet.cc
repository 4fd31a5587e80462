// gpipe_bench amoebanet: W5 of shared/BENCHMARKS.md. One SGD (momentum 0.9)
// training step of AmoebaNet-D(2, 32) on 64 random 3x32x32 images, at each
// thread count: gpipe (Pipeline K = 1, M = 1) and PyTorch
// (benchmarks/amoebanet_torch.py), each in a fresh process. Both sides use
// real 3x3 max pooling (gpipe's default; the script's --true-maxpool) unless
// --torchgpipe-maxpool asks both for torchgpipe's AvgPool quirk.
#include <cstdio>

#include "core/error.h"
#include "tools/bench/benchmarks.h"
#include "tools/bench/common.h"

namespace gpipe::bench {

int run_amoebanet(const AmoebaNetBenchOptions& opt) {
  const double gflop = 3 * 4.37e6 * 64 / 1e9;
  std::printf(
      "# W5 AmoebaNet-D(2,32): N=64, 3x32x32, SGD(lr=0.01, momentum=0.9), max_pool_3x3 = %s;\n"
      "# median of %d steps after %d warm-up (%.0f s max); %s\n",
      opt.quirk_maxpool ? "AvgPool (torchgpipe quirk)" : "MaxPool", opt.steps, opt.warmup,
      opt.max_seconds, opt.torch.env_note.c_str());
  StepComparison c{"W5",    "img",
                   {},      64,
                   679578,  "amoebanet_torch.py",
                   "",      opt.quirk_maxpool ? "" : " --true-maxpool",
                   "%10.2f"};
  c.model.workload = "amoebanet";
  c.model.layers = 2;
  c.model.batch = 64;
  c.model.quirk_maxpool = opt.quirk_maxpool;
  return compare_steps(c, opt.torch,
                       {opt.threads, opt.warmup, opt.steps, opt.max_seconds, opt.rounds}, gflop);
}

}  // namespace gpipe::bench
