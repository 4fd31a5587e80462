// PieceCache: the ids of pre-tokenised pieces already merged, shared by the
// threads that encode with one BpeTokenizer (Note [BPE cache] in
// data/bpe_tokenizer.cc). Internal to the BPE tokenizer.
#pragma once

#include <atomic>
#include <cstdint>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

namespace gpipe::bpe {

class PieceCache {
 public:
  // Pieces longer than this are not kept.
  static constexpr size_t kMaxPieceBytes = 64;
  // At most this many pieces; later ones are not kept (the common words come
  // early in any large text).
  static constexpr size_t kCapacity = size_t{1} << 16;

  // Appends the ids of `piece` to `ids` and returns true if it is kept.
  bool find(std::string_view piece, std::vector<int64_t>& ids) const;
  // Keeps `piece` -> `ids` if there is room and no other thread is inserting.
  void insert(std::string_view piece, const std::vector<int32_t>& ids);

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t piece_offset = 0;
    uint32_t ids_offset = 0;
    uint16_t piece_bytes = 0;  // 0: empty
    uint16_t id_count = 0;
  };
  static constexpr size_t kSlots = 2 * kCapacity;  // half full at most

  static uint64_t hash(std::string_view piece);
  bool find_unlocked(std::string_view piece, uint64_t h, std::vector<int64_t>& ids) const;

  mutable std::shared_mutex mutex_;
  std::vector<Slot> slots_;   // allocated on the first insert
  std::string pieces_;        // every kept piece's bytes, back to back
  std::vector<int32_t> ids_;  // every kept piece's ids, back to back
  size_t size_ = 0;
  // Set once the table is full: it never changes again, so lookups need no lock.
  std::atomic<bool> full_{false};
};

}  // namespace gpipe::bpe
