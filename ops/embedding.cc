// Embedding front: a gather kernel forward, a scatter-add kernel backward,
// which adds straight into a parameter's grad() (rows used only) when the
// table is one, and makes a dense gradient otherwise.
// The kernel validates the indices before writing, so a bad index throws
// without leaving a half-filled output behind.
#include "ops/embedding.h"

#include "core/autograd.h"
#include "ops/common.h"
#include "ops/embedding_kernels.h"

namespace gpipe::ops {

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  detail::check_floating("embedding", weight, "the weight");
  GPIPE_CHECK(weight.rank() == 2, "embedding: expected weight [V, D], got shape ", weight.shape());
  GPIPE_CHECK(indices.defined(), "embedding: indices is an undefined tensor");
  GPIPE_CHECK(is_integral(indices.dtype()), "embedding: expected int32 or int64 indices, got ",
              indices.dtype());
  GPIPE_CHECK(indices.device() == weight.device(), "embedding: indices are on ", indices.device(),
              " but the weight is on ", weight.device());

  const Tensor wd = detail::dense(weight);
  const Tensor id = detail::dense(indices);
  std::vector<int64_t> dims = indices.shape().dims();
  dims.push_back(weight.size(1));
  Tensor out = Tensor::empty(Shape(dims), weight.dtype(), weight.device());
  embedding_forward(weight.device(), wd, id, out);

  if (accumulates_in_place(weight)) {
    // A parameter: its rows are added into its grad() directly, only those
    // the indices use (no dense [V, D] gradient per call).
    record_accumulate_into("embedding", weight, out,
                           [ids = id.detach()](const std::vector<Tensor>& g, Tensor& grad) {
                             const Tensor gy = detail::dense(g[0]);
                             embedding_backward(gy.device(), gy, ids, true, grad);
                           });
    return out;
  }
  record("embedding", {weight}, out,
         [ids = id.detach(), wshape = weight.shape()](const std::vector<Tensor>& g) {
           const Tensor gy = detail::dense(g[0]);
           Tensor gw = Tensor::empty(wshape, gy.dtype(), gy.device());
           embedding_backward(gy.device(), gy, ids, false, gw);
           return std::vector<Tensor>{gw};
         });
  return out;
}

}  // namespace gpipe::ops
