// Shuffling and row gathering for the batchers. The permutation uses its own
// bounded draw (Lemire's multiply-shift on splitmix64 output) so that the same
// seed gives the same epochs on every compiler and machine.
#include "data/batch.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/rng.h"

namespace gpipe {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [0, bound); bias below 2^-32 for the sizes used here.
uint64_t draw_below(uint64_t& state, uint64_t bound) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(splitmix64(state)) * bound) >> 64);
}

}  // namespace

std::vector<int64_t> permutation(int64_t n, uint64_t seed) {
  GPIPE_CHECK(n >= 0, "permutation: negative size ", n);
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  uint64_t state = seed;
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(draw_below(state, static_cast<uint64_t>(i) + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  if (shuffle) return permutation(n, mix_key(seed, static_cast<uint64_t>(epoch)));
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  return p;
}

EpochSampler::EpochSampler(int64_t n, int64_t batch_size, uint64_t seed, bool shuffle,
                           bool drop_last)
    : n_(n), batch_size_(batch_size), seed_(seed), shuffle_(shuffle), drop_last_(drop_last) {
  GPIPE_CHECK(batch_size_ > 0, "EpochSampler: batch_size must be positive, got ", batch_size_);
  GPIPE_CHECK(batches_per_epoch() > 0, "EpochSampler: ", n_, " examples make no batch of ",
              batch_size_, (drop_last_ ? " (drop_last is on)" : ""));
  order_ = epoch_order(n_, seed_, epoch_, shuffle_);
}

int64_t EpochSampler::batches_per_epoch() const {
  return drop_last_ ? n_ / batch_size_ : (n_ + batch_size_ - 1) / batch_size_;
}

std::vector<int64_t> EpochSampler::next_rows() {
  const int64_t end = std::min(position_ + batch_size_, n_);
  std::vector<int64_t> rows(order_.begin() + position_, order_.begin() + end);
  position_ = end;
  if (drop_last_ ? n_ - position_ < batch_size_ : position_ >= n_) {
    ++epoch_;
    position_ = 0;
    order_ = epoch_order(n_, seed_, epoch_, shuffle_);
  }
  return rows;
}

Tensor gather_rows(const Tensor& src, const std::vector<int64_t>& rows) {
  GPIPE_CHECK(src.rank() >= 1, "gather_rows: expected a tensor with a batch axis, got shape ",
              src.shape());
  GPIPE_CHECK(src.device().is_cpu() && src.is_contiguous(),
              "gather_rows: expected a contiguous CPU tensor, got one on ", src.device());
  std::vector<int64_t> dims = src.shape().dims();
  const int64_t n = dims[0];
  dims[0] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(Shape(dims), src.dtype());
  const size_t row_bytes = n == 0 ? 0 : src.nbytes() / static_cast<size_t>(n);
  const auto* from = static_cast<const char*>(src.raw_data());
  auto* to = static_cast<char*>(out.raw_data());
  for (size_t i = 0; i < rows.size(); ++i) {
    GPIPE_CHECK(rows[i] >= 0 && rows[i] < n, "gather_rows: row ", rows[i], " out of range [0, ", n,
                ")");
    std::memcpy(to + i * row_bytes, from + static_cast<size_t>(rows[i]) * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace gpipe
