// conv2d forward / backward-data / backward-filter on CUDA through cuDNN's
// graph API (ops/cuda/cudnn_backend.h): one single-operation graph per
// (direction, dtype, shapes, options, alignment, TF32 flag, device), built
// once and cached with its execution plan.
//
// Layout: NCHW tensors with packed strides; the weight is [O, C/groups, kh,
// kw], so cuDNN infers the group count from C / (C/groups). Depthwise and
// grouped convolutions need nothing more. Cross-correlation, like the CPU.
// Engine policy (cudnn_backend.h), first match wins: precompiled
// deterministic engines without down-converted inputs (and, for float32
// unless TF32 is allowed, without tensor cores); then without the
// determinism requirement; then runtime-compiled engines too; then (float32)
// tensor cores. Never an engine that converts inputs down or reduces in
// reduced precision. Set GPIPE_CUDNN_LOG=1 to print each plan's engine and notes.
// Workspace comes from the caching allocator, charged to kWorkspace.
// bfloat16 operands (Note [16-bit convolution] in ops/cpu/conv.cc; CUDA side in
// Note [16-bit convolution on CUDA] below) take cuDNN's bfloat16 graphs.
// Should cuDNN have no plan for a problem (or GPIPE_CONV_DIRECT=1), the
// direct kernels of ops/cuda/conv_direct.cu run instead, with a note on
// stderr: slower, same results.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "ops/conv_kernels.h"
#include "ops/cuda/alignment.h"
#include "ops/cuda/conv_direct.h"
#include "ops/cuda/cudnn_backend.h"
#include "ops/elementwise_kernels.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device.h"

namespace gpipe::ops::cuda {
namespace {

enum class Direction : int64_t { kForward, kBackwardData, kBackwardFilter };

const char* direction_name(Direction d) {
  switch (d) {
    case Direction::kForward:
      return "conv2d_forward";
    case Direction::kBackwardData:
      return "conv2d_backward_input";
    case Direction::kBackwardFilter:
      return "conv2d_backward_weight";
  }
  return "conv2d";
}

constexpr int64_t kUidX = 1, kUidW = 2, kUidY = 3;

struct Problem {
  Direction direction;
  DType dtype;
  std::vector<int64_t> x, w, y;  // NCHW dims
  Conv2dParams p;
  int64_t alignment;
  bool tf32;
  int device;

  std::vector<int64_t> key() const {
    std::vector<int64_t> k{static_cast<int64_t>(direction),
                           static_cast<int64_t>(dtype),
                           p.stride_h,
                           p.stride_w,
                           p.pad_h,
                           p.pad_w,
                           p.dilation_h,
                           p.dilation_w,
                           p.groups,
                           alignment,
                           tf32,
                           device};
    k.insert(k.end(), x.begin(), x.end());
    k.insert(k.end(), w.begin(), w.end());
    k.insert(k.end(), y.begin(), y.end());
    return k;
  }
};

cudnnDataType_t cudnn_type(DType t) {
  if (t == DType::kFloat32) return CUDNN_DATA_FLOAT;
  if (t == DType::kFloat64) return CUDNN_DATA_DOUBLE;
  if (t == DType::kBFloat16) return CUDNN_DATA_BFLOAT16;
  throw Error(detail::concat("conv2d on CUDA: expected float32, float64 or bfloat16, got ", t));
}

// The type products are summed in: float64 for float64, else float32.
cudnnDataType_t compute_type(DType t) {
  return t == DType::kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

cudnn::Descriptor operation(const Problem& pr, const cudnn::Descriptor& conv,
                            const cudnn::Descriptor& x, const cudnn::Descriptor& w,
                            const cudnn::Descriptor& y) {
  struct Attrs {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t alpha, beta, conv, x, w, y;
  };
  const Attrs a = pr.direction == Direction::kForward
                      ? Attrs{CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y}
                  : pr.direction == Direction::kBackwardData
                      ? Attrs{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY}
                      : Attrs{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY};
  cudnn::Descriptor op(a.type);
  op.set_descriptor(a.conv, conv)
      .set_descriptor(a.x, x)
      .set_descriptor(a.w, w)
      .set_descriptor(a.y, y);
  if (pr.dtype == DType::kFloat64) {  // alpha / beta in the compute type
    const double one = 1.0, zero = 0.0;
    op.set(a.alpha, CUDNN_TYPE_DOUBLE, 1, &one).set(a.beta, CUDNN_TYPE_DOUBLE, 1, &zero);
  } else {
    const float one = 1.0f, zero = 0.0f;
    op.set(a.alpha, CUDNN_TYPE_FLOAT, 1, &one).set(a.beta, CUDNN_TYPE_FLOAT, 1, &zero);
  }
  op.finalize();
  return op;
}

// No round accepts an engine that converts its inputs down or reduces in
// reduced precision: without another engine the problem takes the exact
// routes instead (the widened TF32 graph for bfloat16, the direct kernels).
// The last round lets float32 use tensor cores (TF32) when nothing else
// runs the problem, as before.
cudnn::PlanPolicy policy_for(const Problem& pr) {
  const std::vector<cudnnBackendNumericalNote_t> lossy{
      CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS, CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION};
  std::vector<cudnnBackendNumericalNote_t> base = lossy;
  if (pr.dtype == DType::kFloat32 && !pr.tf32) base.push_back(CUDNN_NUMERICAL_NOTE_TENSOR_CORE);
  std::vector<cudnnBackendNumericalNote_t> strict = base;
  strict.push_back(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);
  return cudnn::PlanPolicy{{{strict, false}, {base, false}, {base, true}, {lossy, true}}};
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// "conv2d_forward (float32, x [2, 3, 5, 5], w [...], ...)" for logs and errors.
std::string describe(const Problem& pr) {
  return detail::concat(direction_name(pr.direction), " (", dtype_name(pr.dtype), ", x ",
                        dims_str(pr.x), ", w ", dims_str(pr.w), ", y ", dims_str(pr.y),
                        ", stride [", pr.p.stride_h, ", ", pr.p.stride_w, "], padding [",
                        pr.p.pad_h, ", ", pr.p.pad_w, "], dilation [", pr.p.dilation_h, ", ",
                        pr.p.dilation_w, "], groups ", pr.p.groups, ")");
}

std::shared_ptr<const cudnn::Plan> build(const Problem& pr, cudnnHandle_t handle) {
  const cudnnDataType_t type = cudnn_type(pr.dtype);
  cudnn::Descriptor conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  conv.set_int64(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, 2)
      .set_data_type(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, compute_type(pr.dtype))
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode)
      .set_int64s(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, {pr.p.stride_h, pr.p.stride_w})
      .set_int64s(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, {pr.p.pad_h, pr.p.pad_w})
      .set_int64s(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, {pr.p.pad_h, pr.p.pad_w})
      .set_int64s(CUDNN_ATTR_CONVOLUTION_DILATIONS, {pr.p.dilation_h, pr.p.dilation_w})
      .finalize();
  cudnn::Descriptor x = cudnn::tensor(kUidX, type, pr.x, pr.alignment);
  cudnn::Descriptor w = cudnn::tensor(kUidW, type, pr.w, pr.alignment);
  cudnn::Descriptor y = cudnn::tensor(kUidY, type, pr.y, pr.alignment);
  cudnn::Descriptor op = operation(pr, conv, x, w, y);
  cudnn::Descriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnnBackendDescriptor_t ops[] = {op.get()};
  graph.set_handle(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, handle)
      .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, ops)
      .finalize();
  const std::string what = describe(pr);
  auto plan = std::make_shared<cudnn::Plan>(cudnn::build_plan(handle, graph, policy_for(pr), what));
  for (cudnn::Descriptor* d : {&conv, &x, &w, &y, &op, &graph})
    plan->keep_alive.push_back(std::move(*d));
  if (const char* log = std::getenv("GPIPE_CUDNN_LOG"); log != nullptr && log[0] == '1')
    std::fprintf(stderr, "gpipe cudnn: %s -> engine %lld [%s], workspace %lld B, policy round %d\n",
                 what.c_str(), static_cast<long long>(plan->engine), plan->notes.c_str(),
                 static_cast<long long>(plan->workspace), plan->round);
  return plan;
}

struct PlanCache {
  std::mutex mu;
  std::map<std::vector<int64_t>, std::shared_ptr<const cudnn::Plan>> plans;
};

PlanCache& plan_cache() {
  static PlanCache* c = new PlanCache;  // never destroyed (plans outlive static destruction)
  return *c;
}

// GPIPE_CONV_DIRECT=1 skips cuDNN and runs the direct kernels (conv_direct.h).
bool use_direct() {
  static const bool direct = [] {
    const char* v = std::getenv("GPIPE_CONV_DIRECT");
    return v != nullptr && v[0] == '1';
  }();
  return direct;
}

// Runs one convolution through cuDNN: x / w / y are the tensors with uids
// 1 / 2 / 3 (in backward passes the gradients stand in for their primals),
// all of one dtype. `tf32` lets float32 problems use TF32 tensor cores.
// Returns false when cuDNN cannot build a plan for the problem: the failure
// is printed once per problem to stderr, remembered, and the caller falls
// back to the direct kernels.
bool run_cudnn(Direction direction, const Tensor& x, const Tensor& w, const Tensor& y,
               const Conv2dParams& params, bool tf32 = gpipe::cuda::allow_tf32()) {
  const Device device = y.device();
  Problem pr{direction,
             x.dtype(),
             x.shape().dims(),
             w.shape().dims(),
             y.shape().dims(),
             params,
             pointer_alignment({x.raw_data(), w.raw_data(), y.raw_data()}, 16),
             tf32,
             device.index};
  gpipe::cuda::DeviceGuard guard(device.index);
  auto handle = gpipe::cuda::cudnn_handle(device.index);
  PlanCache& cache = plan_cache();
  std::shared_ptr<const cudnn::Plan> plan;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.plans.find(pr.key());
    if (it != cache.plans.end()) {
      known = true;
      plan = it->second;
    }
  }
  if (!known) {
    try {
      plan = build(pr, handle.get());
    } catch (const Error& e) {
      // bfloat16 falls back to the widened TF32 graph (Note [16-bit convolution on CUDA]).
      std::fprintf(stderr, "gpipe: no cuDNN plan for %s, using %s: %s\n", describe(pr).c_str(),
                   pr.dtype == DType::kBFloat16 ? "the float32 graph on widened operands"
                                                : "the direct CUDA convolution",
                   e.what());
    }
    std::lock_guard<std::mutex> lock(cache.mu);
    cache.plans.emplace(pr.key(), plan);  // a null plan remembers the failure
  }
  if (!plan) return false;
  Tensor ws;
  if (plan->workspace > 0) {
    MemoryCategoryGuard category(MemoryCategory::kWorkspace);
    ws = Tensor::empty(Shape{(plan->workspace + 7) / 8}, DType::kInt64, device);
  }
  cudnn::execute(handle.get(), *plan, {kUidX, kUidW, kUidY},
                 {x.raw_data(), w.raw_data(), y.raw_data()},
                 ws.defined() ? ws.raw_data() : nullptr);
  // ws is freed here: the caching allocator hands it out again only to later
  // work on the same compute stream, which runs after this convolution.
  return true;
}

// Note [16-bit convolution on CUDA]. Under bf16 precision the front
// function hands the kernels x, weight and grad_y as bfloat16 and y, grad_x
// and grad_weight as float32 (one group or several; the CPU's contract is
// Note [16-bit convolution] in ops/cpu/conv.cc).
// - Forward and backward-data run cuDNN's all-bfloat16 graphs (bfloat16
//   tensor cores, float32 sums) into a bfloat16 scratch that is widened into
//   the float32 result: the result is rounded to bfloat16 once (before the
//   bias is added). The front rounds bfloat16 activations and the input
//   gradient to bfloat16 anyway; for float32 activations this one rounding
//   (2^-9 relative) is where CUDA differs from the CPU's float32 y.
// - Backward-filter widens its operands and runs the float32 graph with TF32
//   allowed: every bfloat16 value is exact in TF32, so the products are
//   exact and the float32 weight gradient is never rounded to 16 bits.
// - Without a bfloat16 plan (or with GPIPE_CONV_DIRECT=1) forward and
//   backward-data take that widened TF32 route too: same values, float32
//   result, slower.
bool bf16_operands(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (a.dtype() != DType::kBFloat16 && b.dtype() != DType::kBFloat16) {
    GPIPE_CHECK(a.dtype() == b.dtype() && out.dtype() == a.dtype(),
                "conv2d on CUDA: operands and result of one dtype expected, got ", a.dtype(), ", ",
                b.dtype(), " and ", out.dtype(), " (a gpipe bug)");
    return false;
  }
  GPIPE_CHECK(
      a.dtype() == DType::kBFloat16 && b.dtype() == DType::kBFloat16 &&
          out.dtype() == DType::kFloat32,
      "conv2d on CUDA: bfloat16 operands need a bfloat16 partner and a float32 result, got ",
      a.dtype(), ", ", b.dtype(), " and ", out.dtype(), " (a gpipe bug)");
  return true;
}

// Scratch tensors live for one kernel call, charged to kWorkspace.
Tensor scratch_like(const Tensor& t, DType dtype) {
  MemoryCategoryGuard category(MemoryCategory::kWorkspace);
  return Tensor::empty(t.shape(), dtype, t.device());
}

Tensor widened(const Tensor& t) {
  Tensor w = scratch_like(t, DType::kFloat32);
  cast_into(t.device(), t, w);
  return w;
}

// The bfloat16 cuDNN graph for `direction` into a bfloat16 scratch of
// `out`'s shape, widened into `out`; false when cuDNN has no plan.
bool run_cudnn_bf16(Direction direction, const Tensor& a, const Tensor& b, Tensor& out,
                    const Conv2dParams& params) {
  if (use_direct()) return false;
  Tensor scratch = scratch_like(out, DType::kBFloat16);
  const bool ran = direction == Direction::kForward
                       ? run_cudnn(direction, a, b, scratch, params)
                       : run_cudnn(direction, scratch, b, a, params);  // dx with w, dy
  if (ran) cast_into(out.device(), scratch, out);
  return ran;
}

void run_float(Direction direction, const Tensor& a, const Tensor& b, Tensor& out,
               const Conv2dParams& params, bool tf32) {
  switch (direction) {
    case Direction::kForward:
      if (use_direct() || !run_cudnn(direction, a, b, out, params, tf32))
        conv2d_direct_forward(a, b, params, out);
      return;
    case Direction::kBackwardData:  // a = grad_y, b = weight, out = grad_x
      if (use_direct() || !run_cudnn(direction, out, b, a, params, tf32))
        conv2d_direct_backward_input(a, b, params, out);
      return;
    case Direction::kBackwardFilter:  // a = grad_y, b = x, out = grad_weight
      if (use_direct() || !run_cudnn(direction, b, out, a, params, tf32))
        conv2d_direct_backward_weight(a, b, params, out);
      return;
  }
}

// One direction for any operand dtype: bfloat16 as the Note says, float32
// and float64 as they are.
void run_direction(Direction direction, const Tensor& a, const Tensor& b, Tensor& out,
                   const Conv2dParams& params) {
  if (!bf16_operands(a, b, out)) {
    run_float(direction, a, b, out, params, gpipe::cuda::allow_tf32());
    return;
  }
  if (direction != Direction::kBackwardFilter && run_cudnn_bf16(direction, a, b, out, params))
    return;
  run_float(direction, widened(a), widened(b), out, params, /*tf32=*/true);
}

void conv2d_forward_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias,
                         const Conv2dParams& params, Tensor& y) {
  if (y.numel() == 0) return;
  GPIPE_CHECK(!bias.defined() || bias.dtype() == y.dtype(), "conv2d on CUDA: a ", bias.dtype(),
              " bias for a ", y.dtype(), " result (a gpipe bug)");
  run_direction(Direction::kForward, x, weight, y, params);
  if (!bias.defined()) return;
  // y += bias[o] on every output plane: the broadcast-add kernel, in place
  // (each element is read and written by the same thread).
  const Tensor b = Tensor::make_view(bias, y.shape(), {0, bias.strides()[0], 0, 0}, bias.offset());
  binary_elementwise(y.device(), BinaryOp::kAdd, y, b, y);
}

void conv2d_backward_input_cuda(const Tensor& grad_y, const Tensor& weight,
                                const Conv2dParams& params, Tensor& grad_x) {
  if (grad_x.numel() == 0) return;
  if (grad_y.numel() == 0 || weight.numel() == 0) {
    grad_x.fill(0.0);
    return;
  }
  run_direction(Direction::kBackwardData, grad_y, weight, grad_x, params);
}

void conv2d_backward_weight_cuda(const Tensor& grad_y, const Tensor& x, const Conv2dParams& params,
                                 Tensor& grad_weight) {
  if (grad_weight.numel() == 0) return;
  if (grad_y.numel() == 0) {
    grad_weight.fill(0.0);
    return;
  }
  run_direction(Direction::kBackwardFilter, grad_y, x, grad_weight, params);
}

}  // namespace

GPIPE_REGISTER_KERNEL(conv2d_forward, DeviceType::kCUDA, conv2d_forward_cuda);
GPIPE_REGISTER_KERNEL(conv2d_backward_input, DeviceType::kCUDA, conv2d_backward_input_cuda);
GPIPE_REGISTER_KERNEL(conv2d_backward_weight, DeviceType::kCUDA, conv2d_backward_weight_cuda);
GPIPE_KERNEL_ACCEPTS_16BIT(conv2d_forward, DeviceType::kCUDA, kBFloat16);
GPIPE_KERNEL_ACCEPTS_16BIT(conv2d_backward_input, DeviceType::kCUDA, kBFloat16);
GPIPE_KERNEL_ACCEPTS_16BIT(conv2d_backward_weight, DeviceType::kCUDA, kBFloat16);

}  // namespace gpipe::ops::cuda
