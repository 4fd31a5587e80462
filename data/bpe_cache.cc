// An open-addressing table over two arenas (piece bytes, ids): a lookup is
// one hash, a probe or two and a memcmp in contiguous memory, where a node-
// based map of strings to vectors chased three pointers per piece.
#include "data/bpe_cache.h"

#include <cstring>
#include <mutex>

namespace gpipe::bpe {

uint64_t PieceCache::hash(std::string_view piece) {
  uint64_t h = 0x243F6A8885A308D3ull ^ piece.size();
  size_t i = 0;
  for (; i + 8 <= piece.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, piece.data() + i, 8);
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, piece.data() + i, piece.size() - i);
  h = (h ^ tail) * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 32);
}

bool PieceCache::find(std::string_view piece, std::vector<int64_t>& ids) const {
  if (piece.empty() || piece.size() > kMaxPieceBytes) return false;
  const uint64_t h = hash(piece);
  if (full_.load(std::memory_order_acquire)) return find_unlocked(piece, h, ids);
  std::shared_lock lock(mutex_);
  return find_unlocked(piece, h, ids);
}

bool PieceCache::find_unlocked(std::string_view piece, uint64_t h,
                               std::vector<int64_t>& ids) const {
  if (slots_.empty()) return false;
  for (size_t i = h & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
    const Slot& s = slots_[i];
    if (s.piece_bytes == 0) return false;
    if (s.hash == h && s.piece_bytes == piece.size() &&
        std::memcmp(pieces_.data() + s.piece_offset, piece.data(), piece.size()) == 0) {
      ids.insert(ids.end(), ids_.begin() + s.ids_offset, ids_.begin() + s.ids_offset + s.id_count);
      return true;
    }
  }
}

void PieceCache::insert(std::string_view piece, const std::vector<int32_t>& ids) {
  if (piece.empty() || piece.size() > kMaxPieceBytes || full_.load(std::memory_order_relaxed))
    return;
  const uint64_t h = hash(piece);
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock() || size_ >= kCapacity) return;
  if (slots_.empty()) slots_.resize(kSlots);
  size_t i = h & (kSlots - 1);
  for (;; i = (i + 1) & (kSlots - 1)) {
    const Slot& s = slots_[i];
    if (s.piece_bytes == 0) break;
    if (s.hash == h && s.piece_bytes == piece.size() &&
        std::memcmp(pieces_.data() + s.piece_offset, piece.data(), piece.size()) == 0)
      return;  // another thread kept it first
  }
  slots_[i] = Slot{h, static_cast<uint32_t>(pieces_.size()), static_cast<uint32_t>(ids_.size()),
                   static_cast<uint16_t>(piece.size()), static_cast<uint16_t>(ids.size())};
  pieces_.append(piece);
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  if (++size_ == kCapacity) full_.store(true, std::memory_order_release);
}

}  // namespace gpipe::bpe
