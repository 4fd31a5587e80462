// Note [Byte-level BPE]. GPT-2's scheme, as the Hugging Face `tokenizers`
// package runs it:
//  1. Added tokens ("<|endoftext|>" and the like) are found whole in the raw
//     text, leftmost first and then longest; each becomes its id, and the
//     text between them goes on alone.
//  2. Pre-tokenisation cuts that text into pieces with a split pattern
//     (data/pretokenize.h): GPT-2's inside the ByteLevel pre-tokenizer
//     (use_regex), or Llama 3's in a Split before it; add_prefix_space puts a
//     space before a piece that does not start with one.
//  3. Each piece's UTF-8 bytes become symbols, one per byte. The file writes
//     tokens through GPT-2's byte-to-unicode map (printable bytes stand for
//     themselves, the rest for U+0100 onwards: a space is "Ġ"); the reader
//     turns every token back into raw bytes once, so encoding works on bytes
//     and never builds the mapped strings.
//  4. Merges by rank: the adjacent pair with the lowest rank is merged, the
//     leftmost first among equals, and the pairs it forms with its neighbours
//     join the queue; repeated until no pair has a merge. This is the
//     reference's priority-queue loop, which also settles files whose merges
//     are out of order the same way (Note [Short merges] for short pieces).
//     With ignore_merges (Llama 3), a piece that is itself a token is taken
//     whole first.
//  5. Decoding concatenates the tokens' raw bytes.
//
// Note [BPE cache]. Most pieces of real text are frequent words, so merged
// pieces up to 64 bytes are kept (the results of ignore_merges too), up to
// 2^16 of them (data/bpe_tables.h). encode() is const and may run on several
// threads: lookups take a shared lock, inserts try an exclusive one and skip
// the cache when another thread holds it.
#include "data/bpe_tokenizer.h"

#include <algorithm>
#include <climits>
#include <mutex>

#include "core/error.h"

namespace gpipe {
namespace {

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  int32_t len;  // 0 once merged into its left neighbour
};

struct QueuedMerge {
  int32_t rank;
  int32_t pos;
  int32_t merged_id;
  // std::push_heap keeps the largest on top: the lowest rank, then leftmost.
  bool operator<(const QueuedMerge& o) const {
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};

}  // namespace

int64_t BpeTokenizer::token_id(std::string_view token) const {
  const auto it = token_ids_.find(std::string(token));
  return it == token_ids_.end() ? -1 : it->second;
}

std::vector<int64_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3 + 1);
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    const auto& candidates = added_by_first_byte_[static_cast<uint8_t>(text[i])];
    const AddedToken* best = nullptr;
    for (const int32_t k : candidates) {
      const AddedToken& t = added_[k];
      if ((best == nullptr || t.content.size() > best->content.size()) &&
          text.substr(i, t.content.size()) == t.content)
        best = &t;
    }
    if (best == nullptr) {
      ++i;
      continue;
    }
    encode_segment(text.substr(start, i - start), ids);
    ids.push_back(best->id);
    i += best->content.size();
    start = i;
  }
  encode_segment(text.substr(start), ids);
  return ids;
}

void BpeTokenizer::encode_segment(std::string_view segment, std::vector<int64_t>& ids) const {
  if (segment.empty()) return;
  std::vector<std::string_view> pieces;
  std::vector<std::string_view> regex_pieces;
  std::string prefixed;
  const auto byte_level = [&](std::string_view piece) {
    if (add_prefix_space_ && piece.front() != ' ') {
      prefixed.assign(1, ' ');
      prefixed.append(piece);
      piece = prefixed;
    }
    if (!byte_level_regex_) return encode_piece(piece, ids);
    bpe::split(piece, bpe::SplitPattern::kGpt2, regex_pieces);
    for (const std::string_view p : regex_pieces) encode_piece(p, ids);
  };
  if (!has_split_) return byte_level(segment);
  bpe::split(segment, split_, pieces);
  for (const std::string_view p : pieces) byte_level(p);
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int64_t>& ids) const {
  if (piece.size() == 1 && byte_ids_[static_cast<uint8_t>(piece[0])] >= 0) {
    ids.push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (cache_.find(piece, ids)) return;
  thread_local std::vector<int32_t> merged;
  merged.clear();
  const int32_t whole = ignore_merges_ ? bytes_ids_.find(piece) : -1;
  if (whole >= 0) {
    merged.push_back(whole);
  } else {
    merge_piece(piece, merged);
  }
  ids.insert(ids.end(), merged.begin(), merged.end());
  cache_.insert(piece, merged);
}

void BpeTokenizer::merge_piece(std::string_view piece, std::vector<int32_t>& out) const {
  // One symbol per byte; a byte with no token becomes unk (consecutive ones
  // fused into one with fuse_unk) or, with no unk token, is dropped, as in
  // the reference.
  out.clear();
  bool pending_unk = false;
  for (const char ch : piece) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(ch)];
    if (id >= 0) {
      pending_unk = false;
      out.push_back(id);
    } else if (unk_id_ >= 0 && !(fuse_unk_ && pending_unk)) {
      out.push_back(unk_id_);
      pending_unk = true;
    }
  }
  if (out.size() <= kShortPiece) {
    merge_short(out);
  } else {
    merge_long(out);
  }
}

// Note [Short merges]. The reference's queue pops the valid pair of lowest
// (rank, position) each time: every pair that forms is queued with its
// rank, and an entry left stale by a neighbour's merge can never pass the
// check that the pair at its position still makes the same token (symbols
// only grow to the right, so the strings differ). For a short piece the same
// order comes cheaper from a scan of the ranks of the current pairs.
void BpeTokenizer::merge_short(std::vector<int32_t>& ids) const {
  constexpr int32_t kNone = INT32_MAX;
  size_t n = ids.size();
  int32_t rank[kShortPiece];
  int32_t merged[kShortPiece];
  const auto pair_rank = [&](size_t i) {
    const bpe::Merge* m = merges_.find(ids[i], ids[i + 1]);
    rank[i] = m != nullptr ? m->rank : kNone;
    merged[i] = m != nullptr ? m->merged_id : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) pair_rank(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == kNone) break;
    ids[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      ids[i] = ids[i + 1];
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best + 1 < n) pair_rank(best);
    if (best > 0) pair_rank(best - 1);
  }
  ids.resize(n);
}

// The reference's loop, for long pieces: a queue of (rank, position).
void BpeTokenizer::merge_long(std::vector<int32_t>& ids) const {
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<QueuedMerge> queue;
  symbols.clear();
  queue.clear();
  const auto n = static_cast<int32_t>(ids.size());
  for (int32_t i = 0; i < n; ++i)
    symbols.push_back(Symbol{ids[i], i - 1, i + 1 < n ? i + 1 : -1, 1});
  const auto enqueue = [&](int32_t pos) {
    const Symbol& s = symbols[pos];
    if (s.next < 0) return;
    if (const bpe::Merge* m = merges_.find(s.id, symbols[s.next].id)) {
      queue.push_back(QueuedMerge{m->rank, pos, m->merged_id});
      std::push_heap(queue.begin(), queue.end());
    }
  };
  for (int32_t pos = 0; pos + 1 < n; ++pos) enqueue(pos);
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end());
    const QueuedMerge top = queue.back();
    queue.pop_back();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const bpe::Merge* m = merges_.find(left.id, right.id);
    if (m == nullptr || m->merged_id != top.merged_id) continue;  // a stale entry
    left.id = top.merged_id;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) enqueue(left.prev);
    enqueue(top.pos);
  }
  ids.clear();
  for (const Symbol& s : symbols)
    if (s.len != 0) ids.push_back(s.id);
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  for (const int64_t id : ids) {
    GPIPE_CHECK(id >= 0 && id < vocab_size(), "tokenizer ", name_, ": id ", id,
                " is outside the vocabulary [0, ", vocab_size(), ")");
    GPIPE_CHECK(assigned_[id], "tokenizer ", name_, ": id ", id, " has no token");
    if (!special_[id]) text += token_bytes_[id];
  }
  return text;
}

}  // namespace gpipe
