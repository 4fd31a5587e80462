// Fused CUDA kernels at shapes and dtype mixes the op table's tiny cases do
// not reach, against the CPU.
//
// The flash attention kernels (Note [Flash attention on CUDA] in
// ops/cuda/attention.cu) against the CPU's fused kernel: several query and key blocks and tiles,
// head widths padded to the kernel's width, Tq != Tk, causal masks with
// padded keys, fully padded examples (uniform rows), and the composed form
// beyond the kernel's widest head. Outputs and the gradients of q, k, v in
// float64, float32, bfloat16 and float16 (tolerances: ops_test.cc's header).
//
// The linear layer's epilogue (ops/cuda/bias_act.cu) on bf16 and fp16
// activations beside a float32 bias, as a 16-bit Transformer runs it, with
// many row chunks; its pending pack kernels against the validated ones, bit
// for bit. A small 16-bit attention case for compute-sanitizer. Attention
// dropout, flash and composed, against the CPU's fused kernel. The fused
// linear's cuBLASLt epilogue (pending), its fallback and the composed ops it
// replaces, against the CPU's fused linear.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <string>

#include "core/autograd.h"
#include "core/precision.h"
#include "ops/attention.h"
#include "ops/attention_kernels.h"
#include "ops/cuda/linear_lt.h"
#include "ops/cuda/pending.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/linalg_kernels.h"
#include "ops/shape.h"
#include "tests/cuda/compare.h"
#include "tests/ops/op_table.h"

namespace gpipe::testing {
namespace {

struct AttentionShape {
  const char* name;
  int64_t b, tq, tk, heads, dh;
  bool causal, padded;
};

// [b, tk] key padding: example e pads its last (e * 37) % tk keys, and the
// last example pads them all (a row that sees no key).
Tensor padding(int64_t b, int64_t tk) {
  std::vector<double> v(b * tk, 0.0);
  for (int64_t e = 0; e < b; ++e) {
    const int64_t n = e == b - 1 ? tk : (e * 37) % tk;
    for (int64_t j = tk - n; j < tk; ++j) v[e * tk + j] = 1.0;
  }
  return Tensor::from_vector(v, Shape{b, tk});
}

// Sets the pending switch while alive; then restores it as the environment set it (gpu_check
// runs these tests with GPIPE_CUDA_PENDING=1; later tests must see it unchanged).
struct PendingScope {
  bool before = ops::cuda::pending_kernels();
  explicit PendingScope(bool on) { ops::cuda::set_pending_kernels(on); }
  ~PendingScope() { ops::cuda::set_pending_kernels(before); }
  PendingScope(const PendingScope&) = delete;
  PendingScope& operator=(const PendingScope&) = delete;
};

// s through the fused op (with `drop` on the probabilities) against the CPU's, every dtype.
// pending 0 or 1: with the switch set so, the flash kernels' dropout taken (1) or declined (0).
void check_shape(const AttentionShape& s, const ops::FusedDropout& drop = {}, int pending = -1) {
  const int64_t d = s.heads * s.dh;
  In in{rand64(Shape{s.b, s.tq, d}, 501, -2, 2), rand64(Shape{s.b, s.tk, d}, 502, -2, 2),
        rand64(Shape{s.b, s.tk, d}, 503)};
  if (s.padded) in.push_back(padding(s.b, s.tk));
  const int64_t heads = s.heads;
  const bool causal = s.causal;
  const Fn fn = [heads, causal, drop](const In& x) {
    return In{
        ops::attention(x[0], x[1], x[2], heads, causal, x.size() > 3 ? x[3] : Tensor(), drop)};
  };
  const std::string how = pending < 0 ? "" : pending == 1 ? " / flash" : " / composed";
  for (DType dtype : {DType::kFloat64, DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    SECTION(std::string(s.name) + how + " / " + std::string(dtype_name(dtype))) {
      std::optional<PendingScope> scope;
      if (pending >= 0) {
        scope.emplace(pending == 1);
        REQUIRE(ops::flash_attention_takes(kGpu, s.dh, drop.p > 0) == (pending == 1));
      }
      const double tol = dtype == DType::kFloat64    ? 1e-9
                         : dtype == DType::kFloat32  ? 1e-3
                         : dtype == DType::kBFloat16 ? 8 * std::ldexp(1.0, -8)
                                                     : 8 * std::ldexp(1.0, -11);
      compare(s.name, fn, in, dtype, tol, true, {0, 1, 2});
    }
  }
}

TEST_CASE("cuda attention: the flash kernels match the CPU's fused attention") {
  REQUIRE(ops::flash_attention_forward.has(DeviceType::kCUDA));
  const AttentionShape shapes[] = {
      // name, b, tq, tk, heads, dh, causal, padded
      {"self 300 tokens, dh 64", 2, 300, 300, 2, 64, false, false},
      {"causal 300 tokens, dh 64", 2, 300, 300, 2, 64, true, false},
      {"causal padded, dh 40 (padded to 64)", 3, 150, 150, 3, 40, true, true},
      {"cross 70 queries x 333 keys, padded, dh 32", 3, 70, 333, 4, 32, false, true},
      {"cross 260 queries x 5 keys, dh 128", 2, 260, 5, 2, 128, false, false},
      {"dh 9 (padded to 16), 17 heads", 2, 33, 47, 17, 9, true, false},
      {"dh 130: the composed form", 1, 20, 24, 1, 130, true, true},
  };
  for (const AttentionShape& s : shapes) check_shape(s);
}

// Small enough for compute-sanitizer (tools/gpu_check.sh runs it under racecheck, synccheck
// and memcheck with GPIPE_CUDA_PENDING=1, the tensor-core kernels): two query and key blocks,
// causal with padded keys and a fully padded example, in both 16-bit types.
TEST_CASE("cuda attention: small 16-bit case") {
  const AttentionShape s{"causal padded 70 tokens, dh 32", 2, 70, 70, 2, 32, true, true};
  const int64_t d = s.heads * s.dh;
  In in{rand64(Shape{s.b, s.tq, d}, 521, -2, 2), rand64(Shape{s.b, s.tk, d}, 522, -2, 2),
        rand64(Shape{s.b, s.tk, d}, 523), padding(s.b, s.tk)};
  const Fn fn = [](const In& x) { return In{ops::attention(x[0], x[1], x[2], 2, true, x[3])}; };
  compare(s.name, fn, in, DType::kBFloat16, 8 * std::ldexp(1.0, -8), true, {0, 1, 2});
  compare(s.name, fn, in, DType::kFloat16, 8 * std::ldexp(1.0, -11), true, {0, 1, 2});
}

// Dropout on the probabilities (Note [Attention dropout] in ops/attention.cc): the flash
// kernels draw the CPU kernel's mask (pending: GPIPE_CUDA_PENDING=1; float32 and float64 on
// the CUDA cores, the 16-bit types on tensor cores from sm_80 on), and without the switch CUDA
// takes the composed form with ops::dropout; both against the CPU's fused op with the same
// mask, outputs and gradients, in every dtype.
TEST_CASE("cuda attention: dropout on the probabilities, flash (pending) and composed") {
  const AttentionShape shapes[] = {
      {"dropout causal padded 150 tokens, dh 40", 3, 150, 150, 3, 40, true, true},
      {"dropout cross 70 queries x 333 keys, dh 64", 2, 70, 333, 2, 64, false, false},
  };
  for (int pending : {1, 0})
    for (const AttentionShape& s : shapes) check_shape(s, {0.2, 9}, pending);
}

TEST_CASE("cuda attention: a fully padded example attends uniformly, with finite gradients") {
  // All keys padded: the mean of the values, as masked_fill's -1e9 gives
  // (Note [Masked scores]); q and k get no gradient, v gets dout / Tk.
  const Tensor q = rand64(Shape{1, 5, 8}, 511).to(kGpu), k = rand64(Shape{1, 7, 8}, 512).to(kGpu);
  Tensor v = rand64(Shape{1, 7, 8}, 513).to(kGpu).detach();
  v.set_requires_grad(true);
  const Tensor pad = Tensor::from_vector<double>(std::vector<double>(7, 1.0), Shape{1, 7}).to(kGpu);
  const Tensor out = ops::attention(q, k, v, 2, false, pad);
  const auto got = out.to(kCpu).to_vector<double>();
  const auto vals = v.detach().to(kCpu).to_vector<double>();
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t c = 0; c < 8; ++c) {
      double mean = 0;
      for (int64_t j = 0; j < 7; ++j) mean += vals[j * 8 + c] / 7;
      CHECK(got[i * 8 + c] == Approx(mean).margin(1e-12));
    }
  backward({out}, {Tensor::full(out.shape(), 1.0, out.dtype(), kGpu)});
  for (double g : v.grad().to(kCpu).to_vector<double>()) CHECK(g == Approx(5.0 / 7).margin(1e-12));
}

TEST_CASE("cuda bias_activation: 16-bit rows beside a float32 bias") {
  for (DType half : {DType::kBFloat16, DType::kFloat16}) {
    for (ops::FusedActivation act : {ops::FusedActivation::kNone, ops::FusedActivation::kRelu,
                                     ops::FusedActivation::kGelu, ops::FusedActivation::kTanh}) {
      SECTION(std::string(dtype_name(half)) + " / activation " +
              std::to_string(static_cast<int>(act))) {
        // z is 16-bit, the bias float32 (its gradient too): the cast sits inside fn.
        const Fn fn = [half, act](const In& x) {
          return In{ops::bias_activation(ops::cast(x[0], half), x[1], act)};
        };
        compare("bias_activation", fn,
                {rand64(Shape{3000, 520}, 531, -2, 2), rand64(Shape{520}, 532)}, DType::kFloat32,
                half == DType::kBFloat16 ? 8 * std::ldexp(1.0, -8) : 8 * std::ldexp(1.0, -11));
      }
    }
  }
}

// Note [Row-wise epilogue kernels] (ops/cuda/bias_act.cu): with the pending
// kernels switched on, the epilogue moves 16-byte packs where the rows allow.
// Outputs and gradients must keep the validated kernels' bits, for every
// dtype and activation, without a bias, with one of the rows' dtype and with
// a float32 one beside 16-bit rows, at shapes that take the packs and at ones
// that fall back.
TEST_CASE("cuda bias_activation: the pending pack kernels give the validated kernels' bits") {
  struct Rows {
    int64_t rows, n;
  };
  const Rows shapes[] = {{3000, 520}, {1, 8}, {7, 64}, {130, 1024}, {5, 12}, {2, 3}};
  for (DType dtype : {DType::kFloat64, DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (ops::FusedActivation act :
         {ops::FusedActivation::kNone, ops::FusedActivation::kRelu, ops::FusedActivation::kGelu,
          ops::FusedActivation::kTanh, ops::FusedActivation::kSigmoid}) {
      for (int bias : {0, 1, 2}) {  // none, the rows' dtype, float32 beside 16-bit rows
        if (bias == 2 && !is_half(dtype)) continue;
        for (const Rows& s : shapes) {
          SECTION(std::string(dtype_name(dtype)) + " / activation " +
                  std::to_string(static_cast<int>(act)) + " / bias " + std::to_string(bias) +
                  " / " + std::to_string(s.rows) + "x" + std::to_string(s.n)) {
            const Fn fn = [dtype, act, bias](const In& x) {
              const Tensor z = bias == 2 ? ops::cast(x[0], dtype) : x[0];
              return In{ops::bias_activation(z, bias == 0 ? Tensor() : x[1], act)};
            };
            const In in{rand64(Shape{s.rows, s.n}, 551, -2, 2), rand64(Shape{s.n}, 552)};
            auto run = [&](bool pending) {
              const PendingScope scope(pending);
              return run_op(fn, in, {0, 1}, true, bias == 2 ? DType::kFloat32 : dtype, kGpu);
            };
            const In validated = run(false), pending = run(true);
            REQUIRE(validated.size() == pending.size());
            for (size_t i = 0; i < validated.size(); ++i) {
              INFO("result " << i << " (output, then the gradients of z and the bias)");
              REQUIRE(validated[i].defined() == pending[i].defined());
              if (!validated[i].defined()) continue;
              CHECK(ops::cast(validated[i], DType::kFloat64).to(kCpu).to_vector<double>() ==
                    ops::cast(pending[i], DType::kFloat64).to(kCpu).to_vector<double>());
            }
          }
        }
      }
    }
  }
}

// Note [cuBLASLt epilogue] (ops/cuda/linear_lt.cc): with the pending kernels on, ops::linear's
// bias, ReLU and residual ride in one cuBLASLt call; with cuBLASLt switched off the fused slot
// runs the composed kernels itself (its fallback); with the pending kernels off, CUDA runs the
// composed ops. All three against the CPU's fused linear, outputs and the gradients of x, w,
// the bias and the residual, in float32 and in bfloat16 under bf16 precision (float32 weight
// and bias, as a layer's), on [2, rows, in] inputs. No pre-activation may sit near ReLU's
// kink, where one rounding against three could flip the mask: with a bias, x and w are small
// and every bias at least 0.5 away from zero; without one, x is positive and each row of w
// has one sign. At shapes whose rows are 16-byte aligned cuBLASLt must have computed the
// forward.
enum class LinearPath { kComposed, kCublasLt, kFallback };

// Switches cuBLASLt off on cuda:0 while alive (LinearPath::kFallback).
struct CublasLtOff {
  CublasLtOff() { ops::cuda::set_cublaslt_linear(0, false); }
  ~CublasLtOff() { ops::cuda::set_cublaslt_linear(0, true); }
  CublasLtOff(const CublasLtOff&) = delete;
  CublasLtOff& operator=(const CublasLtOff&) = delete;
};

// The kernel profile on while alive.
struct ProfileOn {
  ProfileOn() {
    ops::kernel_profile::reset();
    ops::kernel_profile::set_enabled(true);
  }
  ~ProfileOn() { ops::kernel_profile::set_enabled(false); }
  ProfileOn(const ProfileOn&) = delete;
  ProfileOn& operator=(const ProfileOn&) = delete;
};

TEST_CASE("cuda linear: the cuBLASLt epilogue (pending), its fallback and the composed ops") {
  struct LinearShape {
    int64_t rows, in, out;
    bool aligned;
  };
  const LinearShape shapes[] = {{512, 256, 384, true}, {128, 1024, 1024, true}, {37, 9, 7, false}};
  struct Form {
    const char* name;
    bool relu, bias, residual;
  };
  const Form forms[] = {{"bias relu", true, true, false},
                        {"bias", false, true, false},
                        {"bias residual", false, true, true},
                        {"residual", false, false, true},
                        {"relu", true, false, false}};
  const char* path_names[] = {"composed", "cuBLASLt", "fallback"};
  for (LinearPath path : {LinearPath::kCublasLt, LinearPath::kFallback, LinearPath::kComposed})
    for (DType io : {DType::kFloat32, DType::kBFloat16})
      for (const Form& f : forms)
        for (const LinearShape& s : shapes) {
          if (path == LinearPath::kFallback && s.in == 1024) continue;  // two shapes suffice
          SECTION(std::string(path_names[static_cast<int>(path)]) + " / " +
                  std::string(dtype_name(io)) + " / " + f.name + " / " + std::to_string(s.rows) +
                  "x" + std::to_string(s.in) + "x" + std::to_string(s.out)) {
            const bool pending = path != LinearPath::kComposed;
            const PendingScope scope(pending);
            std::optional<CublasLtOff> off;
            if (path == LinearPath::kFallback) off.emplace();
            REQUIRE(ops::linear_bias_act_takes(kGpu, io, f.relu, f.residual, 0.0) == pending);
            const double a = std::sqrt(0.15 / std::sqrt(static_cast<double>(s.in)));
            std::vector<double> x = rand64(Shape{2, s.rows, s.in}, 561, -a, a).to_vector<double>();
            std::vector<double> w = rand64(Shape{s.out, s.in}, 562, -a, a).to_vector<double>();
            std::vector<double> b = rand64(Shape{s.out}, 563).to_vector<double>();
            for (double& v : b) v = (v < 0 ? -0.5 : 0.5) + 0.5 * v;
            if (f.relu && !f.bias) {
              for (double& v : x) v = 0.5 * a + 0.5 * std::abs(v);
              for (int64_t o = 0; o < s.out; ++o)
                for (int64_t i = 0; i < s.in; ++i)
                  w[o * s.in + i] =
                      (o % 2 == 0 ? 1 : -1) * (0.5 * a + 0.5 * std::abs(w[o * s.in + i]));
            }
            const In in{Tensor::from_vector(x, Shape{2, s.rows, s.in}),
                        Tensor::from_vector(w, Shape{s.out, s.in}),
                        Tensor::from_vector(b, Shape{s.out}), rand64(Shape{2, s.rows, s.out}, 564)};
            const Fn fn = [io, f](const In& t) {
              const PrecisionScope precision(io == DType::kBFloat16 ? Precision::kBFloat16
                                                                    : Precision::kFloat32);
              return In{
                  ops::linear(ops::cast(t[0], io), t[1], f.bias ? t[2] : Tensor(),
                              f.relu ? ops::FusedActivation::kRelu : ops::FusedActivation::kNone,
                              f.residual ? ops::cast(t[3], io) : Tensor())};
            };
            // Which path the forward took: the fused slot, and in it cuBLASLt or not.
            int64_t fused = 0, lt_calls = 0;
            {
              const ProfileOn profile;
              const int64_t before = ops::cuda::cublaslt_linear_calls();
              run_op(fn, in, {}, false, DType::kFloat32, kGpu);
              lt_calls = ops::cuda::cublaslt_linear_calls() - before;
              for (const auto& e : ops::kernel_profile::snapshot())
                if (e.name == "linear_bias_act") fused += e.calls;
            }
            CHECK(fused == (pending ? 1 : 0));
            INFO("cuBLASLt computed " << lt_calls
                                      << " forward(s); where it declined, stderr says why");
            if (path != LinearPath::kCublasLt) CHECK(lt_calls == 0);
            if (path == LinearPath::kCublasLt && s.aligned) CHECK(lt_calls == 1);
            std::vector<int> which{0, 1};
            if (f.bias) which.push_back(2);
            if (f.residual) which.push_back(3);
            compare("linear", fn, in, DType::kFloat32,
                    io == DType::kBFloat16 ? 8 * std::ldexp(1.0, -8) : 1e-4, true, which);
          }
        }
}

// Past ops::cuda::kCublasLtMaxPlans plans a device drops them all and makes them again: a row
// count per call (ragged batches) must keep giving the CPU's results through cuBLASLt.
TEST_CASE("cuda linear: a new row count per call, past the plan cap (pending)") {
  const PendingScope scope(true);
  const Tensor w = rand64(Shape{8, 16}, 571), b = rand64(Shape{8}, 572);
  const Tensor wg = w.to(kGpu), bg = b.to(kGpu);
  const int64_t calls = static_cast<int64_t>(ops::cuda::kCublasLtMaxPlans) + 40;
  const int64_t before = ops::cuda::cublaslt_linear_calls();
  double worst = 0;
  for (int64_t rows = 1; rows <= calls; ++rows) {
    const Tensor x = rand64(Shape{rows, 16}, 573 + rows);
    const Tensor want = ops::linear(x, w, b, ops::FusedActivation::kRelu);
    const Tensor got = ops::linear(x.to(kGpu), wg, bg, ops::FusedActivation::kRelu).to(kCpu);
    worst = std::max(worst, rel_err(got, want));
  }
  INFO("cuBLASLt computed " << ops::cuda::cublaslt_linear_calls() - before << " of " << calls);
  CHECK(ops::cuda::cublaslt_linear_calls() - before == calls);
  CHECK(worst < 1e-4);
}

// Views one element into larger buffers (4-byte aligned in float32, 2-byte in bfloat16): the
// plan key's alignments and preferences, and the bias copied to an aligned block (Note [cuBLASLt
// epilogue]), must still give the CPU's results, through cuBLASLt or its fallback.
TEST_CASE("cuda linear: operands at odd offsets (pending)") {
  const PendingScope scope(true);
  const int64_t rows = 64, in = 32, out = 48;
  // Tensor t as a view one element into a buffer of its dtype on `device`.
  const auto offset_view = [](const Tensor& t, Device device) {
    const Tensor flat = ops::reshape(t, {-1});
    const Tensor big = ops::concat({ops::narrow(flat, 0, 0, 1), flat}, 0).to(device);
    return ops::reshape(ops::narrow(big, 0, 1, t.numel()), t.shape().dims());
  };
  for (DType io : {DType::kFloat32, DType::kBFloat16})
    for (bool residual : {false, true}) {
      CAPTURE(io, residual);
      const PrecisionScope precision(io == DType::kBFloat16 ? Precision::kBFloat16
                                                            : Precision::kFloat32);
      const Tensor x = ops::cast(rand64(Shape{rows, in}, 581, -0.5, 0.5), io);
      const Tensor w = ops::cast(rand64(Shape{out, in}, 582, -0.5, 0.5), DType::kFloat32);
      const Tensor b = ops::cast(rand64(Shape{out}, 583), DType::kFloat32);
      const Tensor r = residual ? ops::cast(rand64(Shape{rows, out}, 584), io) : Tensor();
      const auto act = residual ? ops::FusedActivation::kNone : ops::FusedActivation::kRelu;
      const Tensor want = ops::linear(x, w, b, act, r);
      const Tensor xv = offset_view(x, kGpu), bv = offset_view(b, kGpu);
      REQUIRE(xv.offset() == 1);
      const Tensor got =
          ops::linear(xv, w.to(kGpu), bv, act, residual ? offset_view(r, kGpu) : Tensor()).to(kCpu);
      CHECK(rel_err(ops::cast(got, DType::kFloat64), ops::cast(want, DType::kFloat64)) <
            (io == DType::kBFloat16 ? 8 * std::ldexp(1.0, -8) : 1e-4));
    }
}

}  // namespace
}  // namespace gpipe::testing
