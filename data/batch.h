// Batch: what a data pipeline hands a training step, and the shared helpers
// for making batches (deterministic shuffling, row gathering).
//
// inputs and targets are Bundles (core/bundle.h): every tensor batch-major,
// axis 0 the example. For Fashion-MNIST inputs = {images [B,1,28,28] float32}
// and targets = {labels [B] int64}; for translation inputs = {src [B,S],
// tgt_in [B,T]} and targets = {tgt_out [B,T]}, all int64.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/bundle.h"  // Bundle and Batch (one definition, shared with pipeline/)
#include "core/tensor.h"

namespace gpipe {

// A source of batches: returns the next one, or std::nullopt when the stream
// is over. Producers run on PrefetchLoader's background thread (data/loader.h).
using BatchProducer = std::function<std::optional<Batch>()>;

// A permutation of 0..n-1 that depends only on (n, seed): a Fisher-Yates
// shuffle driven by splitmix64, identical on every platform and standard
// library (std::shuffle is not).
std::vector<int64_t> permutation(int64_t n, uint64_t seed);

// The indices of one epoch: 0..n-1, shuffled with mix_key(seed, epoch) when
// `shuffle`, in order otherwise.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);

// Which rows make the next batch: walks epoch_order(n, seed, e, shuffle) in
// steps of batch_size and moves to epoch e + 1 when epoch e is used up. With
// drop_last every batch has exactly batch_size rows (a short tail is
// skipped); without it the last batch of an epoch may be shorter.
class EpochSampler {
 public:
  EpochSampler(int64_t n, int64_t batch_size, uint64_t seed, bool shuffle, bool drop_last);

  std::vector<int64_t> next_rows();
  int64_t batches_per_epoch() const;
  int64_t epoch() const { return epoch_; }        // epoch of the next batch
  int64_t position() const { return position_; }  // its first row within the epoch order

 private:
  int64_t n_, batch_size_;
  uint64_t seed_;
  bool shuffle_, drop_last_;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> order_;
};

// A new contiguous CPU tensor of rows `rows` (indices into axis 0) of `src`,
// which must be a contiguous CPU tensor; shape [rows.size(), src.shape[1:]...].
// Throws gpipe::Error for an out-of-range row.
Tensor gather_rows(const Tensor& src, const std::vector<int64_t>& rows);

}  // namespace gpipe
