// The lookup tables of the byte-level BPE (data/bpe_tokenizer.h), internal
// to it: merges by token pair, tokens by their bytes, and the cache of
// merged pieces. All are open-addressing tables over flat arrays: node-based
// maps spent a third of encoding chasing pointers.
#pragma once

#include <atomic>
#include <cstdint>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

namespace gpipe::bpe {

// A hash of a byte string (a multiply-xorshift over 8-byte words).
uint64_t hash_bytes(std::string_view bytes);

struct Merge {
  int32_t rank = 0;
  int32_t merged_id = 0;
};

// (left id, right id) -> Merge, the inner loop's one lookup.
class MergeTable {
 public:
  // A repeated pair keeps the last merge, as the reference's map does.
  void insert_or_assign(int32_t left, int32_t right, Merge merge);
  const Merge* find(int32_t left, int32_t right) const {
    if (keys_.empty()) return nullptr;
    const uint64_t key = pack(left, right);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &values_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are below 2^24
  static uint64_t pack(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  size_t slot(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void grow();

  std::vector<uint64_t> keys_;
  std::vector<Merge> values_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

// A token's raw bytes -> its id (for ignore_merges: is a piece a token?).
class TokenTable {
 public:
  void insert_or_assign(std::string_view bytes, int32_t id);
  // The id, or -1.
  int32_t find(std::string_view bytes) const;

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0;
    uint32_t bytes = 0;
    int32_t id = -1;  // -1: empty
  };
  size_t probe(std::string_view bytes, uint64_t h) const;
  void grow();

  std::vector<Slot> slots_;
  std::string arena_;
  size_t size_ = 0;
  size_t longest_ = 0;
};

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
