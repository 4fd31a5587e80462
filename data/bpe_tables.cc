// Linear probing over power-of-two tables kept at most half full. The piece
// cache and the token table keep their strings back to back in one arena,
// so a lookup is one hash, a probe or two and a memcmp in contiguous memory.
#include "data/bpe_tables.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <mutex>

namespace gpipe::bpe {

uint64_t hash_bytes(std::string_view piece) {
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

void MergeTable::insert_or_assign(int32_t left, int32_t right, Merge merge) {
  if (2 * (size_ + 1) > keys_.size()) grow();
  const uint64_t key = pack(left, right);
  size_t i = slot(key);
  while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
  if (keys_[i] == kEmpty) ++size_;
  keys_[i] = key;
  values_[i] = merge;
}

void MergeTable::grow() {
  std::vector<uint64_t> keys = std::move(keys_);
  std::vector<Merge> values = std::move(values_);
  const size_t capacity = keys.empty() ? 1024 : 2 * keys.size();
  keys_.assign(capacity, kEmpty);
  values_.assign(capacity, Merge{});
  mask_ = capacity - 1;
  shift_ = 64 - std::countr_zero(capacity);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == kEmpty) continue;
    size_t j = slot(keys[i]);
    while (keys_[j] != kEmpty) j = (j + 1) & mask_;
    keys_[j] = keys[i];
    values_[j] = values[i];
  }
}

size_t TokenTable::probe(std::string_view bytes, uint64_t h) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.id < 0) return i;
    if (s.hash == h && s.bytes == bytes.size() &&
        std::memcmp(arena_.data() + s.offset, bytes.data(), bytes.size()) == 0)
      return i;
  }
}

void TokenTable::insert_or_assign(std::string_view bytes, int32_t id) {
  if (2 * (size_ + 1) > slots_.size()) grow();
  const uint64_t h = hash_bytes(bytes);
  Slot& s = slots_[probe(bytes, h)];
  if (s.id < 0) {
    s = Slot{h, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(bytes.size()), id};
    arena_.append(bytes);
    ++size_;
    longest_ = std::max(longest_, bytes.size());
  }
  s.id = id;
}

int32_t TokenTable::find(std::string_view bytes) const {
  if (slots_.empty() || bytes.size() > longest_) return -1;
  return slots_[probe(bytes, hash_bytes(bytes))].id;
}

void TokenTable::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 1024 : 2 * old.size(), Slot{});
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.id < 0) continue;
    size_t i = s.hash & mask;
    while (slots_[i].id >= 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

bool PieceCache::find(std::string_view piece, std::vector<int64_t>& ids) const {
  if (piece.empty() || piece.size() > kMaxPieceBytes) return false;
  const uint64_t h = hash_bytes(piece);
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
  const uint64_t h = hash_bytes(piece);
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
