#include "layers/decode.h"

#include "core/error.h"

namespace gpipe {
namespace {
thread_local LayerDecodeCache* current = nullptr;
}  // namespace

LayerDecodeCache& DecodeSession::cache(int64_t layer, int micro_batch) {
  std::lock_guard<std::mutex> lock(mu_);
  return caches_[{layer, micro_batch}];
}

void DecodeSession::check_layout(std::pair<int64_t, int> rows_and_pieces) {
  std::lock_guard<std::mutex> lock(mu_);
  if (layout_.first < 0) {
    layout_ = rows_and_pieces;
    return;
  }
  GPIPE_CHECK(layout_ == rows_and_pieces, "decode session: it was started with ", layout_.first,
              " rows in ", layout_.second, " micro-batches, but this call has ",
              rows_and_pieces.first, " rows in ", rows_and_pieces.second,
              " (a session continues one batch of generations)");
}

void DecodeSession::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  caches_.clear();
  layout_ = {-1, -1};
}

DecodeScope::DecodeScope(DecodeSession* session, int64_t layer, int micro_batch) : prev_(current) {
  if (session) current = &session->cache(layer, micro_batch);
}

DecodeScope::~DecodeScope() { current = prev_; }

LayerDecodeCache* current_decode_cache() { return current; }

}  // namespace gpipe
