// Padding and shifting of token sequences into [B, S] / [B, T] id tensors.
#include "data/translation_batch.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace gpipe {
namespace {

int64_t capped(int64_t len, int64_t cap) { return cap > 0 ? std::min(len, cap) : len; }

// Copies rows into a [B, width] PAD-filled tensor, truncating each at width.
Tensor pad_rows(const std::vector<std::vector<int64_t>>& rows, int64_t width) {
  const auto b = static_cast<int64_t>(rows.size());
  std::vector<int64_t> flat(static_cast<size_t>(b * width), ByteTokenizer::kPad);
  for (int64_t i = 0; i < b; ++i) {
    const auto& r = rows[static_cast<size_t>(i)];
    const int64_t n = std::min<int64_t>(width, static_cast<int64_t>(r.size()));
    std::copy(r.begin(), r.begin() + n, flat.begin() + i * width);
  }
  return Tensor::from_vector(flat, Shape{b, width});
}

// src as given; tgt_in = BOS t, tgt_out = t EOS; each padded to its longest row, capped.
template <typename EncodeRow>
TranslationBatch batch_rows(int64_t rows, const EncodeRow& encode_row,
                            const TranslationBatchOptions& options) {
  std::vector<std::vector<int64_t>> src, tgt_in, tgt_out;
  int64_t s_len = 1, t_len = 1;
  for (int64_t i = 0; i < rows; ++i) {
    std::vector<int64_t> t;
    src.push_back(encode_row(i, t));
    tgt_in.push_back({ByteTokenizer::kBos});
    tgt_in.back().insert(tgt_in.back().end(), t.begin(), t.end());
    t.push_back(ByteTokenizer::kEos);
    tgt_out.push_back(std::move(t));
    s_len = std::max<int64_t>(s_len, static_cast<int64_t>(src.back().size()));
    t_len = std::max<int64_t>(t_len, static_cast<int64_t>(tgt_out.back().size()));
  }
  s_len = capped(s_len, options.max_src_len);
  t_len = capped(t_len, options.max_tgt_len);
  return TranslationBatch{pad_rows(src, s_len), pad_rows(tgt_in, t_len), pad_rows(tgt_out, t_len)};
}

void check_rows(const std::vector<int64_t>& rows, size_t n) {
  GPIPE_CHECK(!rows.empty(), "make_translation_batch: expected at least one row");
  for (const int64_t r : rows)
    GPIPE_CHECK(r >= 0 && r < static_cast<int64_t>(n), "make_translation_batch: row ", r,
                " out of range [0, ", n, ")");
}

}  // namespace

TranslationBatch make_translation_batch(const std::vector<TranslationPair>& pairs,
                                        const std::vector<int64_t>& rows,
                                        const ByteTokenizer& tokenizer,
                                        const TranslationBatchOptions& options) {
  check_rows(rows, pairs.size());
  return batch_rows(
      static_cast<int64_t>(rows.size()),
      [&](int64_t i, std::vector<int64_t>& tgt) {
        const TranslationPair& p = pairs[static_cast<size_t>(rows[static_cast<size_t>(i)])];
        std::vector<int64_t> src = tokenizer.encode_with_tag(p.language, p.source);
        tgt = tokenizer.encode(p.target);
        return src;
      },
      options);
}

TranslationBatch make_translation_batch(const std::vector<EncodedPair>& pairs,
                                        const std::vector<int64_t>& rows,
                                        const TranslationBatchOptions& options) {
  check_rows(rows, pairs.size());
  return batch_rows(
      static_cast<int64_t>(rows.size()),
      [&](int64_t i, std::vector<int64_t>& tgt) {
        const EncodedPair& p = pairs[static_cast<size_t>(rows[static_cast<size_t>(i)])];
        tgt = p.tgt;
        return p.src;
      },
      options);
}

TranslationBatch make_translation_batch(const std::vector<TranslationPair>& pairs,
                                        const ByteTokenizer& tokenizer,
                                        const TranslationBatchOptions& options) {
  std::vector<int64_t> rows(pairs.size());
  std::iota(rows.begin(), rows.end(), int64_t{0});
  return make_translation_batch(pairs, rows, tokenizer, options);
}

Batch to_batch(const TranslationBatch& b) { return Batch{{b.src, b.tgt_in}, {b.tgt_out}}; }

TranslationBatcher::TranslationBatcher(std::vector<TranslationPair> pairs, ByteTokenizer tokenizer,
                                       TranslationBatchOptions options)
    : pairs_(std::make_shared<const std::vector<TranslationPair>>(std::move(pairs))),
      tokenizer_(std::move(tokenizer)),
      options_(options),
      sampler_(static_cast<int64_t>(pairs_->size()), options.batch_size, options.seed,
               options.shuffle, options.drop_last) {
  for (const TranslationPair& p : *pairs_)
    tokenizer_.language_id(p.language);  // fail early, naming it
}

TranslationBatch TranslationBatcher::next() {
  return make_translation_batch(*pairs_, sampler_.next_rows(), tokenizer_, options_);
}

BatchProducer translation_batch_producer(TranslationBatcher batcher, int64_t epochs) {
  return [batcher = std::move(batcher), epochs]() mutable -> std::optional<Batch> {
    if (epochs > 0 && batcher.epoch() >= epochs) return std::nullopt;
    return to_batch(batcher.next());
  };
}

}  // namespace gpipe
