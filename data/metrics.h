// Evaluation metrics: chrF for translation, accuracy for classification and
// token prediction.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace gpipe {

// UTF-8 to Unicode code points. An invalid byte b (a bad lead or
// continuation byte, a truncated, overlong or surrogate sequence, a value
// past U+10FFFF) becomes U+DC00 + b, as Python's "surrogateescape" does, so
// it is one character and distinct from every valid one.
std::u32string decode_utf8(std::string_view s);

// chrF (Popović 2015) with sacreBLEU's defaults: character n-grams of orders
// 1..6 over Unicode code points of the UTF-8 text, whitespace removed,
// beta = 2. Corpus level: n-gram counts are summed over all sentences, then
// for each order with n-grams on both sides precision and recall are taken,
// averaged over those orders, and combined into an F-beta score in [0, 100].
// Invalid UTF-8 bytes count as one character each.
struct ChrfOptions {
  int char_order = 6;
  double beta = 2.0;
  bool whitespace = false;  // true: keep whitespace characters in the n-grams
};

class ChrfAccumulator {
 public:
  static constexpr int kMaxOrder = 16;
  explicit ChrfAccumulator(ChrfOptions options = {});

  void add(std::string_view hypothesis, std::string_view reference);
  double score() const;  // chrF of everything added, in [0, 100]; 0 when empty

 private:
  ChrfOptions options_;
  // Per order n (index n-1): n-grams in hypotheses, in references, in both.
  std::array<int64_t, kMaxOrder> hyp_{}, ref_{}, match_{};
};

// Corpus-level chrF; the vectors must have equal length (gpipe::Error otherwise).
double chrf(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references,
            const ChrfOptions& options = {});
// chrF of one sentence pair.
double sentence_chrf(std::string_view hypothesis, std::string_view reference,
                     const ChrfOptions& options = {});

struct AccuracyCount {
  int64_t correct = 0;
  int64_t total = 0;
  double value() const {
    return total > 0 ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
  }
};

// Counts positions whose argmax over the last axis of `logits` ([..., C],
// float, any device) equals `labels` ([...], int32/int64, same leading
// shape), skipping positions whose label is `ignore_index` (e.g. PAD = 0 for
// token accuracy; the default -1 skips nothing for class labels). Ties go to
// the lowest class. Throws gpipe::Error for mismatched shapes or dtypes.
AccuracyCount count_correct(const Tensor& logits, const Tensor& labels, int64_t ignore_index = -1);
// count_correct(...).value(): the fraction in [0, 1].
double accuracy(const Tensor& logits, const Tensor& labels, int64_t ignore_index = -1);

}  // namespace gpipe
