#include "layers/decode.h"

namespace gpipe {
namespace {
thread_local LayerDecodeCache* current = nullptr;
}  // namespace

LayerDecodeCache& DecodeSession::cache(int64_t layer, int micro_batch) {
  std::lock_guard<std::mutex> lock(mu_);
  return caches_[{layer, micro_batch}];
}

void DecodeSession::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  caches_.clear();
}

DecodeScope::DecodeScope(DecodeSession* session, int64_t layer, int micro_batch) : prev_(current) {
  if (session) current = &session->cache(layer, micro_batch);
}

DecodeScope::~DecodeScope() { current = prev_; }

LayerDecodeCache* current_decode_cache() { return current; }

}  // namespace gpipe
