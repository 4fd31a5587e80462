// Incremental (cached) decoding: state a layer keeps between the steps of
// one autoregressive generation, so each new token costs one position of
// work instead of a re-run over the whole prefix.
//
//   DecodeSession session;
//   for (each step) out = pipe.predict({src, newest_tokens}, &session);
//
// The pipeline sets, around each layer's forward, which layer and
// micro-batch is running (DecodeScope); a layer that supports incremental
// decoding finds its cache with current_decode_cache() and, when there is
// one, treats its token input as the newest positions only. Layers that do
// not support it ignore the session (so a model of them must be fed the
// whole prefix, as without one). Eval mode only: a cache holds no graph.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "core/tensor.h"

namespace gpipe {

// One layer's state for one micro-batch: named tensors (keys and values so
// far, a fixed memory's projections, a stage's constant outputs) and the
// number of positions already decoded.
struct LayerDecodeCache {
  std::map<std::string, Tensor> tensors;
  int64_t position = 0;
  bool has(const std::string& name) const { return tensors.count(name) > 0; }
};

// The caches of one generation, by (layer index in the model, micro-batch).
// Thread-safe: the stages of a pipeline use it from their own threads.
class DecodeSession {
 public:
  LayerDecodeCache& cache(int64_t layer, int micro_batch);
  // Every call of a session must cut the same rows into the same
  // micro-batches (the caches are per micro-batch): the first call records
  // (rows, pieces), later ones must match; throws gpipe::Error otherwise.
  void check_layout(std::pair<int64_t, int> rows_and_pieces);
  void clear();  // forget every cache and the layout (a new generation)

 private:
  std::mutex mu_;
  std::pair<int64_t, int> layout_{-1, -1};
  std::map<std::pair<int64_t, int>, LayerDecodeCache>
      caches_;  // nodes never move: references stay valid
};

// Sets the current thread's cache for the duration of one layer's forward
// (no-op for a null session).
class DecodeScope {
 public:
  DecodeScope(DecodeSession* session, int64_t layer, int micro_batch);
  ~DecodeScope();
  DecodeScope(const DecodeScope&) = delete;
  DecodeScope& operator=(const DecodeScope&) = delete;

 private:
  LayerDecodeCache* prev_;
};

// The cache of the layer running on this thread, or null outside a session.
LayerDecodeCache* current_decode_cache();

}  // namespace gpipe
