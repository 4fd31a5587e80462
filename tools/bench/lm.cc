// gpipe_bench lm: one Adam training step of a GPT-2-small-shaped or a
// Llama-shaped language model (models/lm.h), N sequences of T tokens,
// gpipe (Pipeline K = 1, M = 1) beside PyTorch (benchmarks/lm_torch.py, the
// same architecture written with torch.nn and scaled_dot_product_attention),
// each in a fresh process, at each thread count.
//
//   gpt2:  d 768, 12 heads, FFN 3072, vocab 50257, tied output (GPT-2 small's shape)
//   llama: d 768, 12 heads, 4 K/V heads, FFN 2048, vocab 32000, rotary theta 500000
#include "models/lm.h"

#include <cstdio>

#include "core/error.h"
#include "tools/bench/benchmarks.h"
#include "tools/bench/common.h"

namespace gpipe::bench {

models::LmConfig lm_workload_config(const std::string& arch, int64_t layers, int64_t context,
                                    int64_t vocab) {
  models::LmConfig c = models::lm_default(arch);
  c.layers = layers;
  c.dim = 768;
  c.heads = 12;
  c.context = context;
  if (arch == "llama") {
    c.kv_heads = 4;
    c.ffn = 2048;
    c.vocab = 32000;
    c.tied = false;
    c.rotary = {.enabled = true, .theta = 500000};
  } else {
    c.ffn = 3072;
    c.vocab = 50257;
  }
  if (vocab > 0) c.vocab = vocab;
  c.seed = 99;
  return c;
}

Batch lm_batch(int64_t n, int64_t context, int64_t vocab, uint64_t seed) {
  uint64_t x = seed;
  auto next = [&] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>((x >> 33) % static_cast<uint64_t>(vocab));
  };
  std::vector<int64_t> tokens(n * context), targets(n * context);
  for (auto& t : tokens) t = next();
  for (auto& t : targets) t = next();
  return {{Tensor::from_vector(tokens, Shape{n, context})},
          {Tensor::from_vector(targets, Shape{n, context})}};
}

double lm_step_flops(const models::LmConfig& c, int64_t n, int64_t t) {
  const double d = static_cast<double>(c.dim), f = static_cast<double>(c.ffn);
  const double kvd = d / static_cast<double>(c.heads) * static_cast<double>(c.kv());
  const double mlp = c.arch == "llama" ? 3 * d * f : 2 * d * f;
  // Per token, forward, as multiply-adds: the projections, the MLP, the dense
  // (not causally halved) scores and weighted sum, the output projection.
  const double per_token = static_cast<double>(c.layers) *
                               (2 * d * d + 2 * d * kvd + mlp + 2 * static_cast<double>(t) * d) +
                           d * static_cast<double>(c.vocab);
  return 3 * 2 * per_token * static_cast<double>(n * t);  // forward + backward = 3 forwards
}

int run_lm(const LmBenchOptions& opt) {
  GPIPE_CHECK(opt.arch == "gpt2" || opt.arch == "llama", "lm: --arch is gpt2 or llama, got '",
              opt.arch, "'");
  GPIPE_CHECK(opt.precision == "fp32" || opt.precision == "bf16",
              "lm: --precision is fp32 or bf16 (PyTorch's CPU autocast), got '", opt.precision,
              "'");
  const models::LmConfig c = lm_workload_config(opt.arch, opt.layers, opt.context, opt.vocab);
  const double gflop = lm_step_flops(c, opt.batch, opt.context) / 1e9;
  std::printf(
      "# lm %s step: %ld layers, d %ld, %ld heads (%ld K/V), FFN %ld, vocab %ld, N=%ld, T=%ld, "
      "%s;\n"
      "# Adam(lr=1e-4); median of %d steps after %d warm-up (%.0f s max); %.1f GFLOP/step; %s\n",
      opt.arch.c_str(), static_cast<long>(c.layers), static_cast<long>(c.dim),
      static_cast<long>(c.heads), static_cast<long>(c.kv()), static_cast<long>(c.ffn),
      static_cast<long>(c.vocab), static_cast<long>(opt.batch), static_cast<long>(opt.context),
      opt.precision.c_str(), opt.steps, opt.warmup, opt.max_seconds, gflop,
      opt.torch.env_note.c_str());
  std::printf(
      "# PyTorch: benchmarks/lm_torch.py (torch.nn, F.scaled_dot_product_attention(is_causal), "
      "F.cross_entropy over the logits); gpipe: models/lm.h, the fused output loss\n");
  StepComparison s{};
  s.name = "lm";
  s.unit = "tok";
  s.units_per_step = static_cast<double>(opt.batch * opt.context);
  s.expected_params = models::lm_parameter_count(c);
  s.script = "lm_torch.py";
  s.gflop_format = "%10.1f";
  s.script_args = detail::concat("--arch ", opt.arch, " --layers ", opt.layers, " --batch ",
                                 opt.batch, " --context ", opt.context, " --vocab ", c.vocab);
  if (opt.precision == "bf16") s.script_extra += " --autocast bf16";
  s.model.workload = opt.arch;
  s.model.layers = opt.layers;
  s.model.batch = opt.batch;
  s.model.context = opt.context;
  s.model.vocab = opt.vocab;
  s.model.precision = opt.precision;
  return compare_steps(s, opt.torch,
                       {opt.threads, opt.warmup, opt.steps, opt.max_seconds, opt.rounds}, gflop);
}

}  // namespace gpipe::bench
