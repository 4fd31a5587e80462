// Cross-entropy front: one fused kernel computes the row log-sum-exps and
// the loss; backward recomputes the softmax from the logits and the saved
// log-sum-exps (no [N, C] probability tensor is kept alive).
#include "ops/loss.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "core/autograd.h"
#include "core/precision.h"
#include "ops/common.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/loss_kernels.h"
#include "ops/shape.h"
#include "ops/weight_cast.h"

namespace gpipe::ops {
namespace {

// What cross_entropy and linear_cross_entropy both check: targets defined,
// integral, on x's device, of x's shape without its last axis (`what` names
// x: "the logits", "the input"), and the smoothing in [0, 1].
void check_targets(const char* op, const Tensor& x, const char* what, const Tensor& targets,
                   const CrossEntropyOptions& opt) {
  GPIPE_CHECK(targets.defined(), op, ": targets is an undefined tensor");
  GPIPE_CHECK(is_integral(targets.dtype()), op, ": expected int32 or int64 targets, got ",
              targets.dtype());
  GPIPE_CHECK(targets.device() == x.device(), op, ": targets are on ", targets.device(), " but ",
              what, " is on ", x.device());
  std::vector<int64_t> lead(x.shape().dims().begin(), x.shape().dims().end() - 1);
  GPIPE_CHECK(targets.shape() == Shape(lead), op, ": expected targets of shape ", Shape(lead), " (",
              what, " ", x.shape(), " without its last axis), got ", targets.shape());
  GPIPE_CHECK(opt.label_smoothing >= 0.0 && opt.label_smoothing <= 1.0, op,
              ": label_smoothing must be in [0, 1], got ", opt.label_smoothing);
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& opt) {
  detail::check_floating("cross_entropy", logits, "the logits");
  GPIPE_CHECK(logits.rank() >= 1, "cross_entropy: expected logits [N, C], got a scalar");
  check_targets("cross_entropy", logits, "the logits", targets, opt);
  GPIPE_CHECK(logits.size(-1) > 0, "cross_entropy: logits ", logits.shape(), " have no classes");

  const Tensor xd = detail::dense(logits);
  const Tensor td = detail::dense(targets);
  const int64_t rows = logits.numel() / logits.size(-1);
  // The loss and the log-sum-exps in float32 for 16-bit logits.
  Tensor loss = Tensor::empty(Shape{}, detail::compute_dtype(logits), logits.device());
  Tensor lse = Tensor::empty({rows}, detail::compute_dtype(logits), logits.device());
  cross_entropy_forward(logits.device(), xd, td, opt.ignore_index, opt.label_smoothing, loss, lse);

  record("cross_entropy", {logits}, loss,
         [xs = xd.detach(), ts = td.detach(), lse, opt](const std::vector<Tensor>& g) {
           Tensor gx = Tensor::empty(xs.shape(), xs.dtype(), xs.device());
           cross_entropy_backward(xs.device(), xs, ts, lse, detail::dense(g[0]), opt.ignore_index,
                                  opt.label_smoothing, gx);
           return std::vector<Tensor>{gx};
         });
  return loss;
}

// Note [Fused output loss]. A language model's last step, logits = x w^T
// over a vocabulary of C and their cross-entropy, materialises [N, C]
// logits and their gradient: for W2 (1024 tokens, C 8192) 32 MB each,
// written and read back about five times, more than the rest of the step's
// activations. linear_cross_entropy instead computes a chunk of rows at a
// time: its logits, the rows' loss and, because the loss is the end of the
// graph, its gradient at once; the chunk's gradient then goes straight into
// the products gx = g w and gw += g^T x (the CPU's order: Note [Vocabulary
// blocks] in ops/cpu/loss.cc). So no [N, C] tensor exists, and there is one exp per logit
// instead of one in forward and one in backward. Backward multiplies the
// saved gx and gw by the upstream gradient (a scalar). The saved gradients
// cost [N, d] + [C, d] until backward against the logits' [N, C]: where
// that is not smaller (fewer rows than d), and on a device without the
// kernel (linear_cross_entropy_fused; CUDA today), the op runs linear then
// cross_entropy. Under bf16 x and w are the bfloat16 roundings ops::linear
// multiplies, and the logits are their float32 products, not rounded to
// bfloat16 before the softmax; the logits' gradient is rounded to bfloat16
// for the products, as the composed ops round it. A model uses it through
// Layer::forward_head and Loss::sum_head (layers/layer.h, layers/loss.h).
namespace {

enum class HeadPath { kComposed, kFloat32, kBFloat16 };

// Chosen from the shapes alone, not from grad mode: a rematerialised cell's
// forward (no graph) and its recompute must compute the same loss.
HeadPath head_path(const Tensor& x, const Tensor& w) {
  const DeviceType dev = x.device().type;
  if (!linear_cross_entropy_fused.has(dev) || w.dtype() != DType::kFloat32 ||
      w.device() != x.device())
    return HeadPath::kComposed;
  const int64_t d = w.size(1), c = w.size(0), n = x.numel() / std::max<int64_t>(d, 1);
  if (n * c <= n * d + c * d) return HeadPath::kComposed;
  const Precision p = current_precision();
  if (p == Precision::kFloat32 && x.dtype() == DType::kFloat32) return HeadPath::kFloat32;
  if (p == Precision::kBFloat16 &&
      (x.dtype() == DType::kFloat32 || x.dtype() == DType::kBFloat16) &&
      linear_cross_entropy_fused.takes_bf16(dev))
    return HeadPath::kBFloat16;
  return HeadPath::kComposed;
}

// Rows of logits per chunk: 16 MB of float32 (GPIPE_LOSS_CHUNK_MB=n: n MB),
// but at least kMinChunkRows rows. On Zen 4 (W2: 1024 rows, C 8192) 16 MB
// and more ran as fast as the composed ops; smaller chunks were slower (each
// re-packs w for two products and re-reads gw), 5% at 8 MB, 30% at 1 MB.
// A large vocabulary makes 16 MB few rows (GPT-2's 50257: 83), and every
// chunk then re-packs all of w and streams all of gw through memory for a
// product of depth 83: GPT-2 small's step (N 8, T 256, 2 layers, one thread
// on a 2-core Xeon) took 7.9 s at 16 MB and 6.2 s at 128 MB (667 rows).
// Hence the floor; W2 (C 8192) is at 512 rows already.
constexpr int64_t kMinChunkRows = 512;

int64_t default_chunk_rows(int64_t c) {
  // GPIPE_LOSS_CHUNK_MB sets the size exactly (16 rows at least), for comparisons.
  static const std::pair<int64_t, int64_t> bytes_floor = [] {
    const char* text = std::getenv("GPIPE_LOSS_CHUNK_MB");
    if (!text) return std::pair<int64_t, int64_t>{int64_t{16} << 20, kMinChunkRows};
    char* end = nullptr;
    const long long mb = std::strtoll(text, &end, 10);
    GPIPE_CHECK(end != text && *end == '\0' && mb >= 1 && mb <= 1 << 20, "GPIPE_LOSS_CHUNK_MB='",
                text, "': expected a whole number of MB, 1 or more (unset: 16)");
    return std::pair<int64_t, int64_t>{static_cast<int64_t>(mb) << 20, 16};
  }();
  return std::max<int64_t>(bytes_floor.second, bytes_floor.first / (4 * std::max<int64_t>(c, 1)));
}

}  // namespace

Tensor linear_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& targets,
                            const CrossEntropyOptions& opt, int64_t chunk_rows) {
  detail::check_floating("linear_cross_entropy", x, "the input");
  detail::check_rank("linear_cross_entropy", w, 2, "weight [C, d]");
  GPIPE_CHECK(x.rank() >= 1 && x.size(-1) == w.size(1), "linear_cross_entropy: input ", x.shape(),
              " does not match weight ", w.shape(), " (expected last axis ", w.size(1), ")");
  GPIPE_CHECK(chunk_rows >= 0, "linear_cross_entropy: chunk_rows must be >= 0 (0: chosen), got ",
              chunk_rows);
  const bool grad = grad_mode_enabled() && (x.requires_grad() || w.requires_grad());
  const HeadPath path = head_path(x, w);
  if (path == HeadPath::kComposed) return cross_entropy(linear(x, w), targets, opt);
  // cross_entropy's checks, on logits that are not there.
  check_targets("linear_cross_entropy", x, "the input", targets, opt);

  const bool bf16 = path == HeadPath::kBFloat16;
  const int64_t d = w.size(1), c = w.size(0);
  const Tensor xh = bf16 ? cast(x, DType::kBFloat16) : x;  // differentiable, as ops::linear rounds
  const Tensor x2 = detail::dense(reshape(xh, {-1, d}));
  const Tensor wd = detail::dense(bf16 ? weight_operand(w, true) : w);
  const Tensor td = detail::dense(reshape(targets, {-1}));
  Tensor loss = Tensor::empty(Shape{}, DType::kFloat32, x.device());
  Tensor gx = grad ? Tensor::empty(x2.shape(), x2.dtype(), x.device()) : Tensor();
  Tensor gw = grad ? Tensor::empty(w.shape(), DType::kFloat32, x.device()) : Tensor();
  const int64_t n = x2.size(0);
  const int64_t rows = std::clamp<int64_t>(chunk_rows > 0 ? chunk_rows : default_chunk_rows(c), 1,
                                           std::max<int64_t>(n, 1));
  Tensor z;
  {
    MemoryCategoryGuard scratch(MemoryCategory::kWorkspace);
    z = Tensor::empty({rows, grad ? c : 0}, DType::kFloat32, x.device());  // no gradient: unused
  }
  // In gpipe_bench profile's product table: its three products (one without
  // a gradient) and the softmax between them.
  kernel_profile::detailed(
      "linear_cross_entropy_fused",
      [&] {
        linear_cross_entropy_fused(x.device(), x2, wd, td, opt.ignore_index, opt.label_smoothing, z,
                                   loss, gx, gw);
      },
      [&] {
        return gpipe::detail::concat("x w^T, softmax loss", grad ? ", gx, gw " : " ",
                                     bf16 ? "bfloat16 " : "float32 ", n, "x", c, "x", d);
      },
      (grad ? 3.0 : 1.0) * 2.0 * static_cast<double>(n) * static_cast<double>(c) * d);
  if (grad)
    record("linear_cross_entropy", {xh, w}, loss,
           [gx, gw, xs = std::vector<int64_t>(xh.shape().begin(), xh.shape().end())](
               const std::vector<Tensor>& g) {
             const double s = g[0].item();
             auto scaled = [&](const Tensor& t) { return s == 1.0 ? t : mul_scalar(t, s); };
             return std::vector<Tensor>{reshape(scaled(gx), xs), scaled(gw)};
           });
  return loss;
}

}  // namespace gpipe::ops
