// bfloat16 training on AMX tiles: every bfloat16 product of the tiny
// Transformer through the AMX path (the hardware's where Linux grants the
// tiles, else the emulation of ops/cpu/gemm_amx_emulated.h), on one cell and
// pipelined over two, against the same training on AVX512_BF16's dot
// products. The two paths sum each product's pairs in other orders, so the
// results agree to bfloat16 round-off, not bit for bit.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/cpu_isa.h"
#include "core/precision.h"
#include "models/transformer.h"
#include "ops/cpu/gemm_amx_emulated.h"
#include "ops/cpu/gemm_packed.h"
#include "pipeline/pipeline.h"
#include "tests/pipeline/tiny_transformer.h"

using namespace gpipe;

namespace {

struct Run {
  double loss = 0;
  std::map<std::string, std::vector<float>> grads;
};

// The tiny Transformer made wide enough that its products fill whole 32 x 32
// tiles and beyond (40 tokens a micro-batch, widths 48 and 96).
Run train_step(int k) {
  const Batch batch = testing::token_batch(16, 5);
  models::TransformerConfig config = testing::tiny();
  config.dim = 48;
  config.ffn = 96;
  config.vocab = 40;
  Pipeline pipe(models::transformer(config),
                {.K = k,
                 .M = 2,
                 .remat = RematMode::kAlways,
                 .threads_per_stage = 1,
                 .precision = Precision::kBFloat16},
                batch);
  Run r;
  r.loss = pipe.train_step(batch).loss;
  for (const NamedTensor& t : pipe.named_state())
    if (t.tensor->requires_grad()) r.grads[t.name] = t.tensor->grad().to_vector<float>();
  return r;
}

double relative_l2(const Run& a, const Run& b) {
  double diff2 = 0, norm2 = 0;
  for (const auto& [name, g] : b.grads) {
    const std::vector<float>& f = a.grads.at(name);
    for (size_t i = 0; i < g.size(); ++i) {
      diff2 += (static_cast<double>(f[i]) - g[i]) * (static_cast<double>(f[i]) - g[i]);
      norm2 += static_cast<double>(g[i]) * g[i];
    }
  }
  return std::sqrt(diff2 / norm2);
}

}  // namespace

TEST_CASE("bf16 training on AMX tiles equals training on AVX512_BF16 to bfloat16 round-off") {
  if (!detected_bf16_dot()) {
    WARN("no AVX512_BF16 on this CPU: neither the AMX path nor its emulation can run");
    return;
  }
  CpuIsaGuard avx512(CpuIsa::kAvx512);
  const bool hardware = detected_amx();
  if (!hardware)
    ops::cpu::set_amx_kernels_for_testing(&ops::cpu::packed::amx_emulated_kernels(), true);
  REQUIRE(ops::cpu::bf16_path() == ops::cpu::Bf16Path::kAmx);
  for (int k : {1, 2}) {
    INFO((hardware ? "AMX hardware" : "AMX emulated") << ", K=" << k);
    const int64_t before = ops::cpu::packed::amx_emulated_tile_products();
    const Run amx = train_step(k);
    if (!hardware) CHECK(ops::cpu::packed::amx_emulated_tile_products() > before);
    Run dot;
    {
      CpuAmxGuard off(false);  // GPIPE_CPU_AMX=off: the dot path
      REQUIRE(ops::cpu::bf16_path() == ops::cpu::Bf16Path::kDot);
      dot = train_step(k);
    }
    CHECK(std::isfinite(amx.loss));
    CHECK(amx.loss == Approx(dot.loss).epsilon(1e-3));
    REQUIRE(amx.grads.size() == dot.grads.size());
    const double rel = relative_l2(amx, dot);
    UNSCOPED_INFO("K=" << k << ": loss " << amx.loss << " (AMX) vs " << dot.loss
                       << " (dot), gradients' relative L2 difference " << rel);
    CHECK(rel < 0.01);
  }
  ops::cpu::set_amx_kernels_for_testing(nullptr);
}
