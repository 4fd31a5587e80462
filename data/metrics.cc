// chrF and accuracy.
//
// chrF follows sacreBLEU's CHRF (2.x, eps_smoothing off): per-order
// statistics are summed over the corpus (a sentence's hypothesis n-grams of
// an order count only if its reference has some); an order contributes to the average
// precision and recall only when both the hypotheses and the references have
// n-grams of that order (so a 3-character corpus is not punished for having
// no 6-grams); F_beta = (1 + b^2) P R / (b^2 P + R). Characters are code
// points, matching Python's str, which sacreBLEU works on.
#include "data/metrics.h"

#include <algorithm>
#include <unordered_map>

#include "core/error.h"

namespace gpipe {

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    int len = b0 < 0x80           ? 1
              : (b0 >> 5) == 0x6  ? 2
              : (b0 >> 4) == 0xe  ? 3
              : (b0 >> 3) == 0x1e ? 4
                                  : 0;
    char32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1f) : len == 3 ? (b0 & 0x0f) : (b0 & 0x07);
    bool ok = len > 0 && i + static_cast<size_t>(len) <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      const auto b = static_cast<uint8_t>(s[i + static_cast<size_t>(k)]);
      ok = (b >> 6) == 0x2;
      cp = (cp << 6) | (b & 0x3f);
    }
    // Reject overlong forms, surrogates and values past U+10FFFF.
    ok = ok && !(len == 2 && cp < 0x80) && !(len == 3 && cp < 0x800) &&
         !(len == 4 && cp < 0x10000) && !(cp >= 0xd800 && cp <= 0xdfff) && cp <= 0x10ffff;
    if (ok) {
      out.push_back(cp);
      i += static_cast<size_t>(len);
    } else {
      out.push_back(0xdc00 + b0);
      ++i;
    }
  }
  return out;
}

namespace {

// Python's str.isspace() set, which sacreBLEU's re.sub(r'\s+', '') removes.
bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

std::u32string prepare(std::string_view s, bool keep_whitespace) {
  std::u32string chars = decode_utf8(s);
  if (!keep_whitespace)
    chars.erase(std::remove_if(chars.begin(), chars.end(), is_space), chars.end());
  return chars;
}

using NgramCounts = std::unordered_map<std::u32string_view, int64_t>;

NgramCounts count_ngrams(const std::u32string& s, size_t n) {
  NgramCounts counts;
  for (size_t i = 0; i + n <= s.size(); ++i) ++counts[std::u32string_view(s).substr(i, n)];
  return counts;
}

}  // namespace

ChrfAccumulator::ChrfAccumulator(ChrfOptions options) : options_(options) {
  GPIPE_CHECK(options_.char_order >= 1 && options_.char_order <= kMaxOrder,
              "chrF: char_order must be in [1, ", kMaxOrder, "], got ", options_.char_order);
  GPIPE_CHECK(options_.beta > 0, "chrF: beta must be positive, got ", options_.beta);
}

void ChrfAccumulator::add(std::string_view hypothesis, std::string_view reference) {
  const std::u32string hyp = prepare(hypothesis, options_.whitespace);
  const std::u32string ref = prepare(reference, options_.whitespace);
  for (int k = 0; k < options_.char_order; ++k) {
    const size_t n = static_cast<size_t>(k) + 1;
    const NgramCounts h = count_ngrams(hyp, n);
    const NgramCounts r = count_ngrams(ref, n);
    // sacreBLEU counts a sentence's hypothesis n-grams of an order only when
    // its reference has n-grams of that order (a 4-character reference adds
    // no 5- or 6-grams to either side, so a longer hypothesis is not charged
    // for them).
    if (ref.size() >= n) {
      hyp_[k] += hyp.size() >= n ? static_cast<int64_t>(hyp.size() - n + 1) : 0;
      ref_[k] += static_cast<int64_t>(ref.size() - n + 1);
    }
    for (const auto& [gram, count] : h)
      if (auto it = r.find(gram); it != r.end()) match_[k] += std::min(count, it->second);
  }
}

double ChrfAccumulator::score() const {
  double precision = 0, recall = 0;
  int effective = 0;
  for (int k = 0; k < options_.char_order; ++k) {
    if (hyp_[k] == 0 || ref_[k] == 0) continue;
    precision += static_cast<double>(match_[k]) / static_cast<double>(hyp_[k]);
    recall += static_cast<double>(match_[k]) / static_cast<double>(ref_[k]);
    ++effective;
  }
  if (effective == 0) return 0.0;
  precision /= effective;
  recall /= effective;
  if (precision + recall == 0) return 0.0;
  const double b2 = options_.beta * options_.beta;
  return 100.0 * (1 + b2) * precision * recall / (b2 * precision + recall);
}

double chrf(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references,
            const ChrfOptions& options) {
  GPIPE_CHECK(hypotheses.size() == references.size(), "chrF: ", hypotheses.size(),
              " hypotheses but ", references.size(),
              " references; expected one reference per hypothesis");
  ChrfAccumulator acc(options);
  for (size_t i = 0; i < hypotheses.size(); ++i) acc.add(hypotheses[i], references[i]);
  return acc.score();
}

double sentence_chrf(std::string_view hypothesis, std::string_view reference,
                     const ChrfOptions& options) {
  ChrfAccumulator acc(options);
  acc.add(hypothesis, reference);
  return acc.score();
}

AccuracyCount count_correct(const Tensor& logits, const Tensor& labels, int64_t ignore_index) {
  GPIPE_CHECK(logits.rank() >= 1 && is_floating(logits.dtype()),
              "accuracy: expected float logits [..., C], got ", logits.dtype(), " ",
              logits.shape());
  GPIPE_CHECK(is_integral(labels.dtype()), "accuracy: expected int32/int64 labels, got ",
              labels.dtype());
  const std::vector<int64_t>& ld = logits.shape().dims();
  GPIPE_CHECK(labels.shape() == Shape(std::vector<int64_t>(ld.begin(), ld.end() - 1)),
              "accuracy: labels of shape ", labels.shape(), " do not match logits of shape ",
              logits.shape(), " (expected the logits' shape without its last axis)");
  const int64_t classes = ld.back();
  GPIPE_CHECK(classes > 0, "accuracy: logits of shape ", logits.shape(), " have no classes");
  const std::vector<float> x = logits.to_vector<float>();
  const std::vector<int64_t> y = labels.to_vector<int64_t>();
  AccuracyCount count;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == ignore_index) continue;
    const float* row = x.data() + i * static_cast<size_t>(classes);
    const int64_t best = std::max_element(row, row + classes) - row;
    count.correct += best == y[i];
    ++count.total;
  }
  return count;
}

double accuracy(const Tensor& logits, const Tensor& labels, int64_t ignore_index) {
  return count_correct(logits, labels, ignore_index).value();
}

}  // namespace gpipe
