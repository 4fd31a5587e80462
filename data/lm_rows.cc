// Rows are found by a binary search over the streams' first rows, so a
// step's batch costs O(batch (log streams + context)) whatever the corpus
// size; a shard's rows read its map directly.

#include "data/lm_rows.h"

#include <algorithm>

#include "core/allocator.h"
#include "core/error.h"

namespace gpipe {

LmRows::LmRows(int64_t context) : context_(context) {
  GPIPE_CHECK(context >= 1, "language-model rows: the context must be >= 1 token, got ", context);
}

void LmRows::add_packed(PackedRows p) {
  GPIPE_CHECK(p.context == context_, "language-model rows: packed with context ", p.context,
              ", expected ", context_);
  Stream s;
  s.tokens = p.stream_tokens;
  s.rows = p.rows;
  s.first_row = total_;
  s.packed = std::move(p);
  total_ += s.rows;
  streams_.push_back(std::move(s));
}

void LmRows::add_shard(std::shared_ptr<const TokenShard> shard, int64_t begin, int64_t end) {
  GPIPE_CHECK(shard && begin >= 0 && begin <= end && end <= shard->size(),
              "language-model rows: tokens [", begin, ", ", end, ") of a shard of ",
              shard ? shard->size() : 0);
  Stream s;
  s.shard = std::move(shard);
  s.begin = begin;
  s.tokens = end - begin;
  s.rows = s.tokens > 0 ? (s.tokens - 1) / context_ : 0;
  s.first_row = total_;
  total_ += s.rows;
  streams_.push_back(std::move(s));
}

int64_t LmRows::stream_tokens() const {
  int64_t n = 0;
  for (const Stream& s : streams_) n += s.tokens;
  return n;
}

void LmRows::row(int64_t r, int64_t* out) const {
  GPIPE_CHECK(r >= 0 && r < total_, "language-model rows: row ", r, " of ", total_);
  const auto it = std::upper_bound(streams_.begin(), streams_.end(), r,
                                   [](int64_t v, const Stream& s) { return v < s.first_row; });
  const Stream& s = *(it - 1);
  const int64_t local = r - s.first_row, n = context_ + 1;
  if (s.shard) {
    const TokenShard& shard = *s.shard;
    const int64_t first = s.begin + local * context_;
    for (int64_t i = 0; i < n; ++i) out[i] = shard[first + i];
  } else {
    const int32_t* src = s.packed.tokens.data() + local * n;
    std::copy(src, src + n, out);
  }
}

std::string LmRows::source(int64_t r, const TextTokenizer& tok) const {
  GPIPE_CHECK(r >= 0 && r < total_, "language-model rows: row ", r, " of ", total_);
  const auto it = std::upper_bound(streams_.begin(), streams_.end(), r,
                                   [](int64_t v, const Stream& s) { return v < s.first_row; });
  const Stream& s = *(it - 1);
  const int64_t local = r - s.first_row;
  if (s.shard) return detail::concat(s.shard->path(), " token ", s.begin + local * context_);
  return row_source(s.packed, tok, local);
}

Tensor LmRows::slice(const std::vector<int64_t>& rows, int64_t skip) const {
  MemoryCategoryGuard cat(MemoryCategory::kWorkspace);
  const int64_t t = context_, n = static_cast<int64_t>(rows.size());
  std::vector<int64_t> v(static_cast<size_t>(n * t)), buf(static_cast<size_t>(t + 1));
  for (int64_t i = 0; i < n; ++i) {
    row(rows[static_cast<size_t>(i)], buf.data());
    std::copy(buf.begin() + skip, buf.begin() + skip + t, v.begin() + i * t);
  }
  return Tensor::from_vector(v, Shape{n, t});
}

Tensor LmRows::inputs(const std::vector<int64_t>& rows) const { return slice(rows, 0); }
Tensor LmRows::targets(const std::vector<int64_t>& rows) const { return slice(rows, 1); }

int64_t shard_split_point(const TokenShard& shard, double fraction, int64_t eot) {
  GPIPE_CHECK(fraction > 0 && fraction < 1, "shard split: fraction ", fraction,
              " is outside (0, 1)");
  const int64_t n = shard.size();
  const int64_t cut = static_cast<int64_t>(static_cast<double>(n) * (1 - fraction));
  for (int64_t i = cut; i >= cut / 2 && i > 0; --i)
    if (shard[i] == eot) return i;
  return cut;
}

}  // namespace gpipe
