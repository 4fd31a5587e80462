// gpipe_bench transformer: W2 of shared/BENCHMARKS.md. One Adam training
// step of the 3+3-layer pre-LN Transformer (d 256, FFN 1024, 4 heads, vocab
// 8192, tied embedding), N = 32, source 32 / target 32 tokens, at each thread
// count: gpipe (Pipeline K = 1, M = 1) and PyTorch
// (benchmarks/transformer_torch.py step), each in a fresh process.
#include <cstdio>

#include "core/error.h"
#include "tools/bench/benchmarks.h"
#include "tools/bench/common.h"

namespace gpipe::bench {

int run_transformer(const TransformerBenchOptions& opt) {
  const double gflop = transformer_step_flops(3, 32, 32, 32, 256, 1024, 8192) / 1e9;
  std::printf(
      "# W2 transformer step: 3+3 layers, d 256, FFN 1024, 4 heads, vocab 8192, N=32, src 32, tgt "
      "32;\n"
      "# Adam(lr=1e-4); median of %d steps after %d warm-up (%.0f s max); %.1f GFLOP/step; %s\n",
      opt.steps, opt.warmup, opt.max_seconds, gflop, opt.torch.env_note.c_str());
  GPIPE_CHECK(opt.precision == "fp32" || opt.precision == "bf16",
              "transformer: --precision is fp32 or bf16 (PyTorch's CPU autocast), got '",
              opt.precision, "'");
  const bool bf16 = opt.precision == "bf16";
  if (bf16)
    std::printf(
        "# bfloat16: gpipe --precision=bf16 (bfloat16 products and layer outputs, float32 "
        "master weights) vs PyTorch torch.autocast(\"cpu\", bfloat16)\n");
  StepComparison c{"W2", "tok", {}, 1024, 7627776, "transformer_torch.py", "step", "", "%10.1f"};
  if (bf16) c.script_extra += " --autocast bf16";
  if (opt.dropout > 0) {
    std::printf(
        "# dropout %g on both sides (embeddings, attention probabilities, FFN hidden, "
        "sublayer outputs; different masks, so the losses differ)\n",
        opt.dropout);
    c.script_extra += " --dropout " + std::to_string(opt.dropout);
  }
  c.model.dropout = opt.dropout;
  c.model.workload = "transformer";
  c.model.precision = opt.precision;
  c.model.unfused_loss = opt.unfused_loss;
  c.model.layers = 3;
  c.model.batch = 32;
  return compare_steps(c, opt.torch,
                       {opt.threads, opt.warmup, opt.steps, opt.max_seconds, opt.rounds}, gflop);
}

}  // namespace gpipe::bench
