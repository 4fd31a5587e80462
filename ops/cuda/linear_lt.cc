// The fused linear on CUDA: one cuBLASLt call with the bias, ReLU and
// residual in its epilogue.
//
// Note [cuBLASLt epilogue]. Pending a GPU run (Note [Pending CUDA kernels]
// in ops/cuda/pending.h): linear_bias_act_takes declines every case until
// the switch is on. A linear layer's forward on CUDA was a cuBLAS GEMM, then
// bias_act_forward and the residual add, each a pass over the product in
// memory (the forward part of the epilogue rows, about 15% of a bf16 T6
// step's GPU time on an H200 with the backward's bias sums, and the residual
// add's 4%: docs/BENCHMARKS.md).
// cuBLASLt computes D = epilogue(alpha op(A) op(B) + beta C): the bias
// (CUBLASLT_EPILOGUE_BIAS) and ReLU (RELU_BIAS, RELU) are applied to the
// float32 sums before D is written, and the residual is C with beta = 1, so
// y = act(x w^T + residual + bias) is written once.
//
// Layout: a row-major y[rows, out] = x[rows, in] w[out, in]^T is the
// column-major D[out, rows] = op_T(A) B with A = w (stored in x out, ld in)
// and B = x (stored in x rows, ld in); C and D are out x rows with ld out;
// the bias, one value per row of D, is one per output feature.
//
// Numerics: close to the composed ops, not their bits. The composed 16-bit
// form rounds the product to bfloat16, adds the bias and rounds again, then
// adds the residual and rounds a third time; cuBLASLt rounds the sum once
// (and rounds the bias too where it takes a bfloat16 copy, below). In
// float32 the additions differ in order: (product + residual) + bias against
// (product + bias) + residual. TF32 follows gpipe::cuda::allow_tf32(), as
// batched_gemm.
//
// Cases: float32 (bias float32) and bfloat16 x, w, residual and y. For
// bfloat16 the float32 bias is tried first (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE);
// cuBLASLt's type table lists only a bfloat16 bias beside bfloat16 D, so
// where it declines or refuses that, a bfloat16 copy of the bias is used,
// noted once on stderr. A bias that is a view at an offset under 16 bytes
// is copied to a fresh block first: the preferences' alignments name A to
// D, and a kernel that assumes an aligned bias would fault (a sticky CUDA
// error, not a status). No dropout and no residual after a ReLU (the
// epilogue would add the residual before the ReLU).
//
// Declines and failures. Where cuBLASLt declines a case (no algorithm, or
// an attribute it rejects; noted once per case on stderr, whatever the row
// count), or refuses it with each algorithm the heuristic offered (not
// tried again), the kernel runs the composed kernels itself (batched_gemm,
// bias_act_forward, the add) into y: slower, same results as the composed
// form. A heuristic out of memory (it loads kernels) or a failed call that
// is not a refusal falls back for that call only. set_cublaslt_linear
// (ops/cuda/linear_lt.h) makes it fall back always, for the tests of that
// path.
//
// One plan per case (dtype, sizes, epilogue, residual, pointer alignments):
// the descriptors and up to kAlgorithms of the heuristic's algorithms, best
// first (with a residual, only those that write D apart from C:
// CUBLASLT_ALGO_CAP_OUT_OF_PLACE_RESULT_SUPPORT), made on first use; a call
// runs the first one not refused. Plans are kept until a device holds
// kCublasLtMaxPlans (rows that change with every batch, as ragged inference
// batches do, add a plan each): then they are all dropped and made again as
// used. The workspace (32 MiB from sm_90 on, 4 MiB before) and the cuBLASLt
// handle are per device; calls on one device hold its lock while they set
// the bias pointer and enqueue on its compute stream, so the one workspace is
// used in stream order.
#include "ops/cuda/linear_lt.h"

#include <cublasLt.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "ops/cuda/alignment.h"
#include "ops/cuda/pending.h"
#include "ops/elementwise_kernels.h"
#include "ops/linalg_kernels.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device.h"

namespace gpipe::ops::cuda {
namespace {

std::atomic<int64_t> g_lt_calls{0};

// The alignment cuBLASLt's preferences ask for (they assume 256 unless told).
uint32_t alignment(const void* p) { return pointer_alignment({p}, 256); }

struct PlanKey {
  DType io;
  bool tf32, relu, bias, bias_bf16, residual;
  int64_t rows, in, out;
  uint32_t align_x, align_w, align_r, align_y, align_b;
  auto tie() const {
    return std::tie(io, tf32, relu, bias, bias_bf16, residual, rows, in, out, align_x, align_w,
                    align_r, align_y, align_b);
  }
  bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
};

// One case's descriptors and algorithms.
enum class PlanState {
  kReady,
  kNoAlgorithm,  // the heuristic offered none (or an attribute was rejected)
  kFailed,       // cublasLtMatmul refused every algorithm: not tried again
};
constexpr int kAlgorithms = 8;  // the heuristic's candidates kept per plan
struct Plan {
  PlanState state = PlanState::kNoAlgorithm;
  const char* why = "";    // kNoAlgorithm: the status that declined, or "no algorithm"
  bool transient = false;  // declined for want of memory: not kept, tried again next call
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> algos;  // best first
  size_t next = 0;                                     // algos[next] on: not refused yet
};

struct Device {
  std::mutex mu;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<PlanKey, Plan> plans;
  Plan declined;  // where plan_for points for a transient decline (not kept)
  // Cases whose decline is on stderr (keyed without the row count, so ragged batches note a
  // case once), and those cublasLtMatmul refused: kept when the plans are dropped, so a refused
  // case is not tried again; each emptied past kMaxRemembered.
  std::set<PlanKey> noted, failed;
  bool noted_bias_copy = false, noted_transient = false;
  bool enabled = true;  // set_cublaslt_linear
};
constexpr size_t kMaxRemembered = 4096;

void remember(std::set<PlanKey>& set, const PlanKey& k) {
  if (set.size() >= kMaxRemembered) set.clear();
  set.insert(k);
}
// Whether the case's note is new (and now on record).
bool first_note(Device& d, PlanKey k) {
  k.rows = 0;
  if (d.noted.count(k) != 0) return false;
  remember(d.noted, k);
  return true;
}

Device& device_state(int index) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<Device>> devices;
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<Device>& d = devices[index];
  if (!d) d = std::make_unique<Device>();
  return *d;
}

// Makes the handle and the workspace on first use (d.mu held); both or neither.
void open(Device& d, int index) {
  if (d.handle != nullptr) return;
  size_t bytes = gpipe::cuda::device_properties(index).major >= 9 ? (32u << 20) : (4u << 20);
  void* workspace = nullptr;
  if (cudaMalloc(&workspace, bytes) != cudaSuccess) {  // memory taken: algorithms without one
    (void)cudaGetLastError();
    workspace = nullptr;
    bytes = 0;
  }
  cublasLtHandle_t handle = nullptr;
  const cublasStatus_t status = cublasLtCreate(&handle);
  if (status != CUBLAS_STATUS_SUCCESS && workspace != nullptr) cudaFree(workspace);
  GPIPE_CUBLAS_CHECK(status);
  d.workspace = workspace;
  d.workspace_bytes = bytes;
  d.handle = handle;
}

std::string describe(const PlanKey& k) {
  return detail::concat(
      dtype_name(k.io), " ", k.rows, "x", k.out, "x", k.in, k.relu ? " +relu" : "",
      k.bias ? (k.bias_bf16 ? " +bias(bf16)" : " +bias") : "", k.residual ? " +residual" : "",
      " (alignments in bytes: x ", k.align_x, ", w ", k.align_w, ", y ", k.align_y, ", residual ",
      k.align_r, ", bias ", k.align_b, ")");
}

// Destroys a plan's descriptors (cublasLtMatmul has read them at its call).
void destroy(Plan& p) {
  if (p.desc != nullptr) cublasLtMatmulDescDestroy(p.desc);
  for (cublasLtMatrixLayout_t l : {p.a, p.b, p.c})
    if (l != nullptr) cublasLtMatrixLayoutDestroy(l);
  p.desc = nullptr;
  p.a = p.b = p.c = nullptr;
}

// Whether an algorithm writes D apart from C (a residual is C, y is D).
bool out_of_place(const cublasLtMatmulAlgo_t& algo) {
  int32_t v = 0;
  size_t written = 0;
  return cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_OUT_OF_PLACE_RESULT_SUPPORT, &v,
                                           sizeof(v), &written) == CUBLAS_STATUS_SUCCESS &&
         v != 0;
}

// The descriptors for key and the heuristic's algorithms (d.mu held); bias is
// a pointer of the key's bias alignment. Any status but success on the way (an
// attribute this cuBLASLt rejects) declines the case; a want of memory (the
// heuristic loads kernels) declines it for this call only.
Plan make_plan(Device& d, const PlanKey& k, const void* bias) {
  Plan p;
  const bool bf16 = k.io == DType::kBFloat16;
  const cudaDataType_t type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute =
      !bf16 && k.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cublasStatus_t st = cublasLtMatmulDescCreate(&p.desc, compute, CUDA_R_32F);
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const auto& v) {
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulDescSetAttribute(p.desc, attr, &v, sizeof(v));
  };
  set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  const cublasLtEpilogue_t epilogue = k.relu && k.bias ? CUBLASLT_EPILOGUE_RELU_BIAS
                                      : k.relu         ? CUBLASLT_EPILOGUE_RELU
                                      : k.bias         ? CUBLASLT_EPILOGUE_BIAS
                                                       : CUBLASLT_EPILOGUE_DEFAULT;
  set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  if (k.bias) {
    const int32_t bias_type = k.bias_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type);
    set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  }
  // Column-major: A = w stored in x out, B = x stored in x rows, C = D out x rows.
  auto layout = [&](cublasLtMatrixLayout_t* l, int64_t rows, int64_t cols) {
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatrixLayoutCreate(l, type, static_cast<uint64_t>(rows),
                                      static_cast<uint64_t>(cols), rows);
  };
  layout(&p.a, k.in, k.out);
  layout(&p.b, k.in, k.rows);
  layout(&p.c, k.out, k.rows);
  cublasLtMatmulPreference_t pref = nullptr;
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceCreate(&pref);
  auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& v) {
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v));
  };
  prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(d.workspace_bytes));
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, k.align_w);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, k.align_x);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, k.residual ? k.align_r : k.align_y);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, k.align_y);
  cublasLtMatmulHeuristicResult_t results[kAlgorithms] = {};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(d.handle, p.desc, p.a, p.b, p.c, p.c, pref, kAlgorithms,
                                        results, &found);
  if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
  // With a residual, C (the residual) and D (y) are apart: only algorithms that allow it.
  for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < found; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS && (!k.residual || out_of_place(results[i].algo)))
      p.algos.push_back(results[i]);
  if (!p.algos.empty()) {
    p.state = PlanState::kReady;
    return p;
  }
  destroy(p);
  p.transient = st == CUBLAS_STATUS_ALLOC_FAILED;
  p.why = st != CUBLAS_STATUS_SUCCESS ? cublasGetStatusName(st)
          : found > 0                 ? "no algorithm that writes D apart from C"
                                      : "no algorithm";
  return p;
}

// Destroys every plan (d.mu held).
void drop_plans(Device& d) {
  for (auto& [key, p] : d.plans) destroy(p);
  d.plans.clear();
}

// The plan for key, made on first use (d.mu held).
Plan* plan_for(Device& d, const PlanKey& k, const void* bias) {
  auto it = d.plans.find(k);
  if (it != d.plans.end()) return &it->second;
  if (d.failed.count(k) != 0) {
    Plan refused;
    refused.state = PlanState::kFailed;
    return &d.plans.emplace(k, refused).first->second;
  }
  Plan made = make_plan(d, k, bias);
  if (made.transient) {
    d.declined = made;
    return &d.declined;
  }
  return &d.plans.emplace(k, std::move(made)).first->second;
}

// Statuses that say an algorithm cannot run this case (as opposed to a want of
// memory or a failed launch, which a later call may not meet).
bool refuses(cublasStatus_t s) {
  return s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE;
}

// y = act(x w^T + bias) + residual through cuBLASLt; false where it is
// switched off (set_cublaslt_linear), declines the case or the call fails
// (noted once per case).
bool run_lt(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu, const Tensor& residual,
            Tensor& y) {
  const int index = y.device().index;
  gpipe::cuda::DeviceGuard guard(index);
  Device& d = device_state(index);
  std::lock_guard<std::mutex> lock(d.mu);
  if (!d.enabled) return false;
  open(d, index);
  if (d.plans.size() >= kCublasLtMaxPlans) drop_plans(d);  // before any Plan* of this call is held
  // The bias as cuBLASLt reads it. Its kernels may assume a 16-byte aligned bias whatever the
  // preferences say (those name A to D only), and a misaligned read there is a sticky CUDA
  // error, not a status: a bias that is a view at an odd offset is copied to a fresh block.
  Tensor bias_used = bias;
  if (bias.defined() && alignment(bias.raw_data()) < 16) bias_used = bias.clone();
  PlanKey k{x.dtype(),
            gpipe::cuda::allow_tf32(),
            relu,
            bias.defined(),
            false,
            residual.defined(),
            x.size(0),
            x.size(1),
            w.size(0),
            alignment(x.raw_data()),
            alignment(w.raw_data()),
            residual.defined() ? alignment(residual.raw_data()) : 256u,
            alignment(y.raw_data()),
            bias.defined() ? alignment(bias_used.raw_data()) : 256u};
  // The cases to try: the float32 bias, then (bfloat16 results) a bfloat16 copy of it, where
  // cuBLASLt takes no float32 bias beside bfloat16 D (its table lists a bfloat16 bias there).
  std::vector<PlanKey> keys{k};
  if (k.bias && k.io == DType::kBFloat16) {
    PlanKey k16 = k;
    k16.bias_bf16 = true;
    k16.align_b = 256;  // a fresh block of the caching allocator (checked below)
    keys.push_back(k16);
  }
  const float one = 1, zero = 0;
  const void* c = residual.defined() ? residual.raw_data() : y.raw_data();
  Tensor bias16;
  for (const PlanKey& key : keys) {
    const void* bias_ptr = key.bias ? bias_used.raw_data() : nullptr;
    if (key.bias_bf16) {
      if (!bias16.defined()) {
        bias16 = Tensor::empty(bias.shape(), DType::kBFloat16, y.device());
        cast_into(y.device(), bias, bias16);
      }
      if (alignment(bias16.raw_data()) != 256) continue;
      bias_ptr = bias16.raw_data();
    }
    Plan* p = plan_for(d, key, bias_ptr);
    if (p->state != PlanState::kReady) {
      if (p->transient && !d.noted_transient) {
        d.noted_transient = true;
        std::fprintf(stderr,
                     "gpipe: cuBLASLt's heuristic ran out of memory on cuda:%d (%s); the linear "
                     "runs as a GEMM and its epilogue kernels until it has some\n",
                     index, p->why);
      } else if (p->state == PlanState::kNoAlgorithm && first_note(d, key)) {
        std::fprintf(stderr, "gpipe: cuBLASLt declines the linear %s (%s)%s\n",
                     describe(key).c_str(), p->why,
                     key.bias && !key.bias_bf16 && keys.size() > 1
                         ? "; trying a bfloat16 copy of the bias"
                         : "; it runs as a GEMM and its epilogue kernels");
      }
      continue;
    }
    if (key.bias) {  // accepted at the plan's making, with a pointer of the same alignment
      GPIPE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                        &bias_ptr, sizeof(bias_ptr)));
      if (key.bias_bf16 && !d.noted_bias_copy) {
        d.noted_bias_copy = true;
        std::fprintf(stderr,
                     "gpipe: cuBLASLt takes no float32 bias beside bfloat16 results on cuda:%d; "
                     "the linear epilogue adds a bfloat16 copy of the bias\n",
                     index);
      }
    }
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    for (; p->next < p->algos.size(); ++p->next) {  // an algorithm refused is not tried again
      const cublasLtMatmulHeuristicResult_t& r = p->algos[p->next];
      status =
          cublasLtMatmul(d.handle, p->desc, &one, w.raw_data(), p->a, x.raw_data(), p->b,
                         residual.defined() ? &one : &zero, c, p->c, y.raw_data(), p->c, &r.algo,
                         d.workspace, r.workspaceSize, gpipe::cuda::compute_stream(index));
      if (status == CUBLAS_STATUS_SUCCESS) {
        g_lt_calls.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
      if (!refuses(status)) break;
    }
    if (p->next < p->algos.size()) {  // a failure another call may not meet: this call only
      std::fprintf(stderr,
                   "gpipe: cuBLASLt failed on the linear %s (%s); this call runs as a GEMM and "
                   "its epilogue kernels\n",
                   describe(key).c_str(), cublasGetStatusName(status));
      return false;
    }
    std::fprintf(stderr,
                 "gpipe: cuBLASLt refused the linear %s with each of its %zu algorithm(s) (%s)%s\n",
                 describe(key).c_str(), p->algos.size(), cublasGetStatusName(status),
                 &key == &keys.back() ? "; it runs as a GEMM and its epilogue kernels from now on"
                                      : "; trying a bfloat16 copy of the bias");
    p->state = PlanState::kFailed;
    remember(d.failed, key);
    remember(d.noted, [&] {
      PlanKey n = key;
      n.rows = 0;
      return n;
    }());
  }
  return false;
}

// The composed form's kernels into y: the GEMM, bias_act_forward and the add, in place.
void run_composed(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu,
                  const Tensor& residual, Tensor& y) {
  GemmShape s;
  s.tb = true;
  s.b_shared = true;
  s.m = x.size(0);
  s.n = w.size(0);
  s.k = x.size(1);
  // y as [rows, out], the shape of x, the residual and the slots' flat views (y keeps the
  // caller's leading axes).
  Tensor y2 = Tensor::make_view(y, Shape{s.m, s.n}, {s.n, 1}, y.offset());
  if (x.dtype() == DType::kBFloat16)
    batched_gemm_bf16_out(y.device(), s, x, w, y2);
  else
    batched_gemm(y.device(), s, x, w, y2);
  if (bias.defined() || relu)
    bias_act_forward(y.device(), relu ? FusedActivation::kRelu : FusedActivation::kNone, y2, bias,
                     y2);
  if (residual.defined()) binary_elementwise(y.device(), BinaryOp::kAdd, residual, y2, y2);
}

bool takes_cuda(DType io, bool relu, bool residual, double dropout) {
  return pending_kernels() && dropout == 0 && !(relu && residual) &&
         (io == DType::kFloat32 || io == DType::kBFloat16);
}

void linear_bias_act_cuda(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu,
                          double dropout, uint64_t, const Tensor& residual, Tensor& y) {
  GPIPE_CHECK(takes_cuda(x.dtype(), relu, residual.defined(), dropout),
              "linear_bias_act on CUDA: a case linear_bias_act_takes declines (", x.dtype(),
              relu ? ", relu" : "", residual.defined() ? ", residual" : "", ", dropout ", dropout,
              ")");
  // ops::linear's contract (fused_linear in ops/linalg.cc), on which the plan's layouts rest:
  // dense rows, a float32 bias of one value per output feature.
  const int64_t rows = x.size(0), out = w.size(0);
  GPIPE_ASSERT(x.rank() == 2 && w.rank() == 2 && w.size(1) == x.size(1) && x.is_contiguous() &&
               w.is_contiguous() && y.is_contiguous() && y.numel() == rows * out);
  GPIPE_ASSERT(w.dtype() == x.dtype() && y.dtype() == x.dtype() &&
               (!residual.defined() || residual.dtype() == x.dtype()));
  GPIPE_ASSERT(!bias.defined() ||
               (bias.dtype() == DType::kFloat32 && bias.numel() == out && bias.is_contiguous()));
  GPIPE_ASSERT(!residual.defined() || (residual.is_contiguous() && residual.numel() == rows * out));
  if (y.numel() == 0) return;
  if (x.size(1) == 0 || !run_lt(x, w, bias, relu, residual, y))
    run_composed(x, w, bias, relu, residual, y);
}

}  // namespace

int64_t cublaslt_linear_calls() { return g_lt_calls.load(std::memory_order_relaxed); }

void set_cublaslt_linear(int device, bool on) {
  Device& d = device_state(device);
  std::lock_guard<std::mutex> lock(d.mu);
  d.enabled = on;
}

GPIPE_REGISTER_KERNEL(linear_bias_act_takes, DeviceType::kCUDA, takes_cuda);
GPIPE_REGISTER_KERNEL(linear_bias_act, DeviceType::kCUDA, linear_bias_act_cuda);
GPIPE_KERNEL_ACCEPTS_16BIT(linear_bias_act, DeviceType::kCUDA, kBFloat16);

}  // namespace gpipe::ops::cuda
