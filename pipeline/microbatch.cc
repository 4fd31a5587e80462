#include "pipeline/microbatch.h"

#include "ops/shape.h"

namespace gpipe {

int64_t batch_size(const Batch& b) {
  int64_t n = -1;
  auto visit = [&](const Bundle& bundle, const char* what) {
    for (size_t i = 0; i < bundle.size(); ++i) {
      const Tensor& t = bundle[i];
      GPIPE_CHECK(t.defined() && t.rank() >= 1, "batch: ", what, " tensor ", i,
                  " has no batch axis (shape ", t.defined() ? t.shape().str() : "undefined", ")");
      if (n < 0) n = t.size(0);
      GPIPE_CHECK(t.size(0) == n, "batch: ", what, " tensor ", i, " has ", t.size(0),
                  " examples, expected ", n, " like the others");
    }
  };
  visit(b.inputs, "input");
  visit(b.targets, "target");
  GPIPE_CHECK(n >= 0, "batch: no tensors");
  return n;
}

std::vector<int64_t> micro_batch_sizes(int64_t n, int64_t m) {
  GPIPE_CHECK(m >= 1, "micro-batches: M must be >= 1, got ", m);
  GPIPE_CHECK(m <= n, "micro-batches: cannot cut a mini-batch of N = ", n, " examples into M = ", m,
              " non-empty micro-batches (need M <= N)");
  std::vector<int64_t> sizes(m, n / m);
  for (int64_t i = 0; i < n % m; ++i) ++sizes[i];
  return sizes;
}

std::vector<Batch> split_micro_batches(const Batch& b, int64_t m) {
  const auto sizes = micro_batch_sizes(batch_size(b), m);
  std::vector<Batch> out(m);
  NoGradGuard no_grad;
  auto cut = [&](const Bundle& bundle, Bundle Batch::*field) {
    for (const Tensor& t : bundle) {
      auto pieces = ops::split(t, sizes, 0);
      for (int64_t i = 0; i < m; ++i) (out[i].*field).push_back(pieces[i]);
    }
  };
  cut(b.inputs, &Batch::inputs);
  cut(b.targets, &Batch::targets);
  return out;
}

int replica_pieces(int pieces, int replica, int replicas) {
  return pieces / replicas + (replica < pieces % replicas ? 1 : 0);
}

ReplicaShare replica_share(int64_t n, int pieces, int replica, int replicas) {
  ReplicaShare sh;
  const std::vector<int64_t> sizes = micro_batch_sizes(n, pieces);
  const int per = pieces / replicas, extra = pieces % replicas;
  const int first = replica * per + std::min(replica, extra);
  sh.pieces = replica_pieces(pieces, replica, replicas);
  for (int i = 0; i < first; ++i) sh.begin += sizes[i];
  for (int i = first; i < first + sh.pieces; ++i) sh.len += sizes[i];
  return sh;
}

Bundle merge_micro_batches(const std::vector<Bundle>& parts) {
  GPIPE_CHECK(!parts.empty(), "merge: no micro-batches");
  Bundle out;
  for (size_t i = 0; i < parts[0].size(); ++i) {
    std::vector<Tensor> xs;
    for (const Bundle& p : parts) xs.push_back(p[i]);
    out.push_back(ops::concat(xs, 0));
  }
  return out;
}

}  // namespace gpipe
