// gpipe_bench kernels: the kernel lab. Each hot CPU kernel, at the shapes W2,
// W3 and W5 use, timed at every ISA level this CPU supports (its kernels are
// compiled per level: Note [CPU ISA kernels] in ops/cpu/isa/abi.h), and beside
// its reference: the baseline level for a vectorised kernel, the composed ops
// for a fused one (at the best level), a dense gradient for the embedding's
// rows-only backward. "fwd+bwd" rows time the op and its backward through
// autograd, as a training step runs them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/cpu_isa.h"
#include "core/parallel.h"
#include "ops/cpu/gemm_packed.h"
#include "ops/ops.h"
#include "ops/optimizer_kernels.h"
#include "tools/bench/benchmarks.h"

namespace gpipe::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Median seconds per call of fn, over at least `seconds` and 5 calls (2 untimed first).
double time_call(const std::function<void()>& fn, double seconds) {
  fn();
  fn();
  std::vector<double> t;
  const auto start = Clock::now();
  while (t.size() < 5 || std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    const auto a = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - a).count());
    if (t.size() >= 1000) break;
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

struct Case {
  std::string name, shape, workload;
  std::function<void()> run;        // the kernel under test
  std::string ref_name;             // "" = its reference is the baseline level
  std::function<void()> reference;  // run at the best level
};

Tensor rnd(const Shape& s, uint64_t seed, bool grad = false) {
  Tensor t = Tensor::uniform(s, seed, -1.0, 1.0, DType::kFloat32);
  if (grad) t.set_requires_grad(true);
  return t;
}

void backward_of(const Tensor& y) { y.backward(Tensor::full(y.shape(), 1.0, y.dtype())); }

// A whole rows x cols float32 operand packed into panels of `lanes` as the
// GEMM driver packs it, by the active level's packer (Note [Masked panel
// packing] in ops/cpu/gemm_pack_avx512.inc): `copy`, the lanes run along a
// row (A^T, B) and slices of kc rows; else across rows (A, B^T) and slices
// of kc columns. A^T panels (copy, lanes < 32) go a group at a time as the
// driver packs them (Note [Grouped transposed A] in ops/cpu/gemm_pack.cc:
// 8 panels, 8 rows at a time). In a training step the operand was written a
// while ago and is not in the caches, so each call packs the next of enough
// copies to pass through 64 MB: a source already in cache favours other
// packers (wider moves, no prefetching) than a cold one does.
Case packing_case(const char* name, const char* shape, bool copy, int64_t rows, int64_t cols,
                  int64_t lanes, int64_t kc) {
  const int64_t elems = rows * cols;
  const int64_t copies = std::max<int64_t>(2, (int64_t{64} << 20) / (4 * elems));
  // Made at the first call, so a filtered run allocates only its own cases.
  auto src = std::make_shared<std::vector<float>>(), dst = std::make_shared<std::vector<float>>();
  auto next = std::make_shared<int64_t>(0);
  const bool grouped = copy && lanes < 32;
  const auto run = [=] {
    if (src->empty()) {
      src->assign(static_cast<size_t>(copies * elems), 0.5f);
      dst->assign(static_cast<size_t>(elems + 64 * kc), 0.0f);
    }
    const auto& ks = ops::cpu::packed_kernels();
    const float* from = src->data() + (*next)++ % copies * elems;
    const int64_t along = copy ? cols : rows, across = copy ? rows : cols;
    float* d = dst->data();
    for (int64_t p0 = 0; p0 < across; p0 += kc) {
      const int64_t depth = std::min(kc, across - p0);
      const int64_t group = grouped ? 8 * lanes : lanes, step = grouped ? 8 : depth;
      for (int64_t g0 = 0; g0 < along; g0 += group) {
        const int64_t g1 = std::min(along, g0 + group);
        for (int64_t p = 0; p < depth; p += step)
          for (int64_t r0 = g0; r0 < g1; r0 += lanes) {
            const int64_t n = std::min(lanes, g1 - r0), rows_now = std::min(step, depth - p);
            float* panel = d + (r0 / lanes) * lanes * depth + p * lanes;
            if (copy)
              ks.pack_copy(from + (p0 + p) * cols + r0, cols, n, rows_now, panel, lanes);
            else
              ks.pack_transposed(from + r0 * cols + p0 + p, cols, n, rows_now, panel, lanes);
          }
      }
      d += ((along + lanes - 1) / lanes) * lanes * depth;
    }
  };
  return {name, shape, "W2", run, "", {}};
}

std::vector<Case> make_cases() {
  std::vector<Case> cs;
  // W2: 32 x 32 tokens, d 256, FFN 1024, 4 heads, vocab 8192.
  const int64_t tok = 1024, d = 256, ffn = 1024, vocab = 8192;
  {
    Tensor a = rnd({tok, ffn}, 1), b = rnd({tok, ffn}, 2);
    cs.push_back({"add", "[1024, 1024]", "W2", [=] { ops::add(a, b); }, "", {}});
    cs.push_back({"gelu", "[1024, 1024]", "W2", [=] { ops::gelu(a); }, "", {}});
  }
  // The GEMM's packing of a linear layer's operands, as the driver packs
  // them (14-lane A panels, 32-lane B panels, k-slices of 256 or 384), from
  // sources out of the caches.
  cs.push_back(
      packing_case("pack A panels (x, fwd)", "[1024, 256] -> 14 x 256", false, tok, d, 14, 256));
  cs.push_back(packing_case("pack A panels (g, FFN dx)", "[1024, 1024] -> 14 x 384", false, tok,
                            ffn, 14, 384));
  cs.push_back(
      packing_case("pack A^T panels (g, dW)", "[1024, 1024] -> 14 x 384", true, tok, ffn, 14, 384));
  cs.push_back(
      packing_case("pack B^T panels (w, fwd)", "[1024, 256] -> 32 x 256", false, ffn, d, 32, 256));
  cs.push_back(
      packing_case("pack B panels (x, dW)", "[1024, 256] -> 32 x 384", true, tok, d, 32, 384));
  cs.push_back(packing_case("pack B panels (h, FFN dW)", "[1024, 1024] -> 32 x 384", true, tok, ffn,
                            32, 384));
  {
    Tensor z = rnd({tok, ffn}, 3, true), bias = rnd({ffn}, 4, true);
    cs.push_back({"bias_activation relu fwd+bwd", "[1024, 1024]", "W2",
                  [=] { backward_of(ops::bias_activation(z, bias, ops::FusedActivation::kRelu)); },
                  "add + relu",
                  [=] {
                    backward_of(
                        ops::bias_activation_composed(z, bias, ops::FusedActivation::kRelu));
                  }});
  }
  {
    Tensor x = rnd({tok, d}, 5, true), g = rnd({d}, 6, true), b = rnd({d}, 7, true);
    cs.push_back({"layer_norm fwd+bwd",
                  "[1024, 256]",
                  "W2",
                  [=] { backward_of(ops::layer_norm(x, g, b)); },
                  "",
                  {}});
    Tensor x3 = rnd({2 * tok, d}, 8, true);
    cs.push_back({"layer_norm fwd+bwd",
                  "[2048, 256]",
                  "W3",
                  [=] { backward_of(ops::layer_norm(x3, g, b)); },
                  "",
                  {}});
  }
  {
    Tensor s = rnd({32 * 4 * 32, 32}, 9, true);
    cs.push_back(
        {"softmax fwd+bwd", "[4096, 32]", "W2", [=] { backward_of(ops::softmax(s, -1)); }, "", {}});
  }
  {
    Tensor logits = rnd({tok, vocab}, 10, true);
    std::vector<int64_t> t(tok);
    for (int64_t i = 0; i < tok; ++i) t[i] = (i * 7919) % vocab;
    Tensor targets = Tensor::from_vector<int64_t>(t, {tok});
    cs.push_back({"cross_entropy fwd+bwd",
                  "[1024, 8192]",
                  "W2",
                  [=] { backward_of(ops::cross_entropy(logits, targets)); },
                  "",
                  {}});
  }
  {
    // The output projection and its loss (Note [Fused output loss]).
    Tensor x = rnd({tok, d}, 16, true), w = rnd({vocab, d}, 17, true);
    std::vector<int64_t> t(tok);
    for (int64_t i = 0; i < tok; ++i) t[i] = (i * 7919) % vocab;
    Tensor targets = Tensor::from_vector<int64_t>(t, {tok});
    cs.push_back({"linear + cross_entropy fwd+bwd", "[1024, 256] x [8192, 256]^T", "W2",
                  [=]() mutable {
                    backward_of(ops::linear_cross_entropy(x, w, targets));
                    x.zero_grad();
                    w.zero_grad();
                  },
                  "linear, cross_entropy",
                  [=]() mutable {
                    backward_of(ops::cross_entropy(ops::linear(x, w), targets));
                    x.zero_grad();
                    w.zero_grad();
                  }});
  }
  {
    Tensor q = rnd({32, 32, d}, 11, true), k = rnd({32, 32, d}, 12, true),
           v = rnd({32, 32, d}, 13, true);
    cs.push_back({"attention causal fwd+bwd", "[32, 32, 256] x 4 heads", "W2",
                  [=] { backward_of(ops::attention(q, k, v, 4, true)); }, "composed ops",
                  [=] { backward_of(ops::attention_composed(q, k, v, 4, true)); }});
    cs.push_back({"attention fwd+bwd", "[32, 32, 256] x 4 heads", "W2",
                  [=] { backward_of(ops::attention(q, k, v, 4, false)); }, "composed ops",
                  [=] { backward_of(ops::attention_composed(q, k, v, 4, false)); }});
    // A Transformer trained with dropout drops attention probabilities too:
    // the fused op draws the mask itself (Note [Attention dropout]).
    cs.push_back({"attention causal +dropout fwd+bwd", "[32, 32, 256] x 4 heads, p=0.1", "W2",
                  [=] {
                    backward_of(ops::attention(q, k, v, 4, true, Tensor(), {0.1, 1}));
                  },
                  "composed ops, ops::dropout",
                  [=] {
                    backward_of(ops::attention_composed(
                        q, k, v, 4, true, Tensor(),
                        [](const Tensor& p) { return ops::dropout(p, 0.1, true, 1); }));
                  }});
  }
  {
    Tensor w = rnd({vocab, d}, 14, true);
    std::vector<int64_t> t(tok);
    for (int64_t i = 0; i < tok; ++i) t[i] = (i * 104729) % vocab;
    Tensor idx = Tensor::from_vector<int64_t>(t, {32, 32});
    cs.push_back({"embedding fwd+bwd", "[8192, 256] table, 1024 rows", "W2",
                  [=]() mutable {
                    backward_of(ops::embedding(w, idx));
                    w.zero_grad();
                  },
                  "dense [V, D] gradient",
                  [=]() mutable {
                    backward_of(ops::embedding(ops::mul_scalar(w, 1.0), idx));
                    w.zero_grad();
                  }});
  }
  {
    Tensor x = rnd({tok, ffn}, 15);
    cs.push_back(
        {"dropout p=0.1", "[1024, 1024]", "W2", [=] { ops::dropout(x, 0.1, true, 1); }, "", {}});
  }
  {
    // A feed-forward block's second product with its sublayer's dropout and
    // residual (Note [Fused residual]): one GEMM and its epilogue, against
    // the GEMM, bias pass, dropout pass and add.
    Tensor h = rnd({tok, ffn}, 22, true), w = rnd({d, ffn}, 23, true), b = rnd({d}, 24, true),
           r = rnd({tok, d}, 25, true);
    cs.push_back({"linear +bias +dropout +residual fwd+bwd", "[1024, 1024] -> 256, p=0.1", "W2",
                  [=] {
                    backward_of(ops::linear(h, w, b, ops::FusedActivation::kNone, r, {0.1, 1}));
                  },
                  "composed ops",
                  [=] {
                    backward_of(ops::add(
                        r, ops::dropout(ops::bias_activation(ops::matmul(h, w, false, true), b,
                                                             ops::FusedActivation::kNone),
                                        0.1, true, 1)));
                  }});
  }
  {
    // W2's forward products with a bias (the attention projections) and
    // with a bias and ReLU (the FFN's first): the epilogue on the
    // accumulators (Note [Epilogue in registers]) against the product and a
    // bias_activation pass.
    Tensor x = rnd({tok, d}, 26), wq = rnd({d, d}, 27), bq = rnd({d}, 28), w1 = rnd({ffn, d}, 29),
           b1 = rnd({ffn}, 30);
    cs.push_back({"linear +bias fwd", "[1024, 256] -> 256", "W2", [=] { ops::linear(x, wq, bq); },
                  "composed ops",
                  [=] {
                    ops::bias_activation(ops::matmul(x, wq, false, true), bq,
                                         ops::FusedActivation::kNone);
                  }});
    cs.push_back({"linear +bias +relu fwd", "[1024, 256] -> 1024", "W2",
                  [=] { ops::linear(x, w1, b1, ops::FusedActivation::kRelu); }, "composed ops",
                  [=] {
                    ops::bias_activation(ops::matmul(x, w1, false, true), b1,
                                         ops::FusedActivation::kRelu);
                  }});
  }
  {
    const int64_t n = 7627776;  // W2's parameters
    Tensor p = rnd({n}, 16), g = rnd({n}, 17), m = rnd({n}, 18), v = Tensor::full({n}, 1.0);
    ops::AdamStepArgs a;
    a.beta2 = 0.999;
    a.one_minus_beta1 = 0.1;
    a.one_minus_beta2 = 0.001;
    a.eps = 1e-8;
    a.step_size = 1e-4;
    a.bc2_sqrt = 0.5;
    cs.push_back({"adam_update",
                  "7,627,776 elements",
                  "W2",
                  [=]() mutable {
                    parallel_for(0, n, 1 << 14, [&](int64_t lo, int64_t hi) {
                      ops::adam_update(p.device(), a, p, g, m, v, lo, hi);
                    });
                  },
                  "",
                  {}});
  }
  // W5: AmoebaNet-D(2, 32), N = 64, 32 x 32.
  {
    Tensor x = rnd({64, 32, 32, 32}, 19, true), gm = rnd({32}, 20, true), bt = rnd({32}, 21, true);
    Tensor rm = Tensor::zeros({32}), rv = Tensor::full({32}, 1.0);
    cs.push_back({"batch_norm fwd+bwd",
                  "[64, 32, 32, 32]",
                  "W5",
                  [=] { backward_of(ops::batch_norm(x, gm, bt, rm, rv, true).y); },
                  "",
                  {}});
    ops::Pool2dOptions po;
    po.kernel = {3, 3};
    po.stride = {1, 1};
    po.padding = {1, 1};
    cs.push_back({"max_pool2d 3x3 fwd+bwd",
                  "[64, 32, 32, 32]",
                  "W5",
                  [=] { backward_of(ops::max_pool2d(x, po)); },
                  "",
                  {}});
    Tensor xs = rnd({64, 8, 32, 32}, 22, true), w = rnd({8, 8, 3, 3}, 23, true);
    ops::Conv2dOptions co;
    co.padding = {1, 1};
    cs.push_back({"conv2d 3x3 fwd+bwd",
                  "[64, 8, 32, 32] -> 8",
                  "W5",
                  [=] { backward_of(ops::conv2d(xs, w, Tensor(), co)); },
                  "",
                  {}});
    Tensor r = rnd({64, 32, 32, 32}, 24, true);
    cs.push_back(
        {"relu fwd+bwd", "[64, 32, 32, 32]", "W5", [=] { backward_of(ops::relu(r)); }, "", {}});
  }
  return cs;
}

}  // namespace

int run_kernels(const KernelsBenchOptions& opt) {
  std::vector<CpuIsa> levels;
  for (int i = static_cast<int>(detected_cpu_isa()); i >= 0; --i)
    levels.push_back(static_cast<CpuIsa>(i));
  std::printf("# kernel lab: median ms per call (>= %.2f s and 5 calls each), float32; %s\n",
              opt.seconds, opt.env_note.c_str());
  std::printf(
      "# ratio = reference / this kernel at the best level (> 1: faster); the reference"
      " is the baseline level unless named\n");
  const std::vector<Case> cases = make_cases();
  for (int threads : opt.threads) {
    ThreadPool pool(threads);
    IntraOpScope scope(&pool);
    std::printf("\n## %d thread%s\n%-30s %-30s %-4s", threads, threads == 1 ? "" : "s", "kernel",
                "shape", "wl");
    for (CpuIsa l : levels) std::printf(" %10s", cpu_isa_name(l));
    std::printf("  %-22s %9s %6s\n", "reference", "ref ms", "ratio");
    for (const Case& c : cases) {
      if (!opt.filter.empty() && c.name.find(opt.filter) == std::string::npos) continue;
      std::printf("%-30s %-30s %-4s", c.name.c_str(), c.shape.c_str(), c.workload.c_str());
      std::vector<double> ms;
      for (CpuIsa l : levels) {
        CpuIsaGuard guard(l);
        ms.push_back(1e3 * time_call(c.run, opt.seconds));
        std::printf(" %10.3f", ms.back());
        std::fflush(stdout);
      }
      double ref = ms.back();  // the baseline level
      std::string ref_name = "baseline level";
      if (c.reference) {
        CpuIsaGuard guard(levels.front());
        ref = 1e3 * time_call(c.reference, opt.seconds);
        ref_name = c.ref_name;
      }
      std::printf("  %-22s %9.3f %6.2f\n", ref_name.c_str(), ref, ref / ms.front());
    }
  }
  return 0;
}

}  // namespace gpipe::bench
