// The kernel profile (Note [Kernel profile] in ops/dispatch.h): what
// gpipe_bench profile reads must count each call once, with its tensors'
// bytes, and nothing while it is off.
#include <catch2/catch.hpp>

#include "core/autograd.h"
#include "ops/dispatch.h"
#include "ops/loss.h"
#include "ops/ops.h"

// A query slot (as flash_attention_takes, linear_bias_act_takes) for the last test.
namespace gpipe::ops {
GPIPE_DECLARE_KERNEL(profile_test_takes, bool(int64_t n));
namespace {
bool takes_even(int64_t n) { return n % 2 == 0; }
}  // namespace
GPIPE_REGISTER_KERNEL(profile_test_takes, DeviceType::kCPU, takes_even);
}  // namespace gpipe::ops

namespace gpipe {
namespace {

const ops::kernel_profile::Entry* find(const std::vector<ops::kernel_profile::Entry>& es,
                                       const std::string& name) {
  for (const auto& e : es)
    if (e.name == name) return &e;
  return nullptr;
}

TEST_CASE("kernel profile: calls, time and tensor bytes per slot, only while enabled") {
  const Tensor a = Tensor::full(Shape{64, 32}, 1.0), b = Tensor::full(Shape{64, 32}, 2.0);
  ops::kernel_profile::reset();
  (void)ops::add(a, b);  // off: not counted
  CHECK(ops::kernel_profile::snapshot().empty());

  ops::kernel_profile::set_enabled(true);
  (void)ops::add(a, b);
  (void)ops::add(a, b);
  (void)ops::matmul(a, b, false, true);
  ops::kernel_profile::set_enabled(false);
  const auto es = ops::kernel_profile::snapshot();
  const auto* add = find(es, "binary_elementwise");
  REQUIRE(add != nullptr);
  CHECK(add->calls == 2);
  CHECK(add->bytes == 2 * 3 * 64 * 32 * 4.0);  // two inputs and the output, float32
  CHECK(add->seconds > 0);
  const auto* mm = find(es, "batched_gemm");
  REQUIRE(mm != nullptr);
  CHECK(mm->calls == 1);
  CHECK(mm->bytes == (64 * 32 + 64 * 32 + 64 * 64) * 4.0);
  // The GEMM shape table beside the slots: one row per shape, with its FLOPs.
  const auto ds = ops::kernel_profile::details();
  REQUIRE(ds.size() == 1);
  CHECK(ds[0].name == "A*B^T float32 64x64x32");
  CHECK(ds[0].slot == "batched_gemm");  // the slot whose time it details
  CHECK(ds[0].calls == 1);
  CHECK(ds[0].flops == 2.0 * 64 * 64 * 32);
  ops::kernel_profile::reset();
  CHECK(ops::kernel_profile::snapshot().empty());
  CHECK(ops::kernel_profile::details().empty());
}

TEST_CASE("kernel profile: the fused output loss's products are a detail of its slot") {
  // gpipe_bench profile's ceiling (Note [Step ceiling] in tools/bench/profile.cc)
  // counts a detailed slot by its FLOPs: the loss's three products, or one
  // without a gradient.
  std::vector<float> xv(16 * 8), wv(64 * 8);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i % 13) / 13.0f - 0.5f;
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<float>(i % 11) / 11.0f - 0.5f;
  std::vector<int64_t> tv(16);
  for (size_t i = 0; i < tv.size(); ++i) tv[i] = static_cast<int64_t>(i * 5 % 64);
  const Tensor x = Tensor::from_vector<float>(xv, {16, 8}).set_requires_grad(true);
  const Tensor w = Tensor::from_vector<float>(wv, {64, 8}).set_requires_grad(true);
  const Tensor t = Tensor::from_vector<int64_t>(tv, {16});
  for (const bool grad : {true, false}) {
    ops::kernel_profile::reset();
    ops::kernel_profile::set_enabled(true);
    if (grad) {
      (void)ops::linear_cross_entropy(x, w, t);
    } else {
      NoGradGuard no_grad;
      (void)ops::linear_cross_entropy(x, w, t);
    }
    ops::kernel_profile::set_enabled(false);
    const auto* slot = find(ops::kernel_profile::snapshot(), "linear_cross_entropy_fused");
    REQUIRE(slot != nullptr);
    const auto ds = ops::kernel_profile::details();
    REQUIRE(ds.size() == 1);
    CHECK(ds[0].slot == "linear_cross_entropy_fused");
    CHECK(ds[0].name == (grad ? "x w^T, softmax loss, gx, gw float32 16x64x8"
                              : "x w^T, softmax loss float32 16x64x8"));
    CHECK(ds[0].calls == 1);
    CHECK(ds[0].flops == (grad ? 3 : 1) * 2.0 * 16 * 64 * 8);
  }
  ops::kernel_profile::reset();
}

TEST_CASE("kernel profile: the 16-bit scratch casts inside a call count toward that call") {
  // softmax has no 16-bit CPU kernel: a bfloat16 call widens its input and
  // narrows its output through cast_into (Note [16-bit kernels]).
  const Tensor x = ops::cast(Tensor::full(Shape{8, 16}, 0.5), DType::kBFloat16);
  ops::kernel_profile::reset();
  ops::kernel_profile::set_enabled(true);
  (void)ops::softmax(x, -1);
  ops::kernel_profile::set_enabled(false);
  const auto es = ops::kernel_profile::snapshot();
  REQUIRE(find(es, "softmax_forward") != nullptr);
  CHECK(find(es, "softmax_forward")->calls == 1);
  CHECK(find(es, "cast_into") == nullptr);
}

}  // namespace
}  // namespace gpipe

namespace gpipe {
namespace {

TEST_CASE("kernel profile: a query slot's answers are not listed as kernels") {
  ops::kernel_profile::reset();
  ops::kernel_profile::set_enabled(true);
  const bool even = ops::profile_test_takes(kCpu, 4), odd = ops::profile_test_takes(kCpu, 3);
  ops::kernel_profile::set_enabled(false);
  CHECK(even);
  CHECK_FALSE(odd);
  CHECK(ops::kernel_profile::snapshot().empty());
}

}  // namespace
}  // namespace gpipe
