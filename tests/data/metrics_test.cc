#include "data/metrics.h"

#include <catch2/catch.hpp>

using namespace gpipe;
using Catch::Matchers::Contains;

TEST_CASE("chrF: identical, disjoint and empty", "[data][metrics]") {
  CHECK(sentence_chrf("Germany", "Germany") == Approx(100.0));
  CHECK(sentence_chrf("abc", "xyz") == 0.0);
  CHECK(sentence_chrf("", "abc") == 0.0);
  CHECK(chrf({}, {}) == 0.0);
  // Whitespace is removed before counting (sacreBLEU's default).
  CHECK(sentence_chrf("New  Zealand", "NewZealand") == Approx(100.0));
  CHECK(sentence_chrf("New Zealand", "NewZealand", {.whitespace = true}) < 100.0);
}

TEST_CASE("chrF: hand-computed partial matches", "[data][metrics]") {
  // hyp "ab", ref "abc":
  //   n=1: hyp {a,b} (2), ref {a,b,c} (3), match 2 -> P = 1, R = 2/3
  //   n=2: hyp {ab} (1),  ref {ab,bc} (2), match 1 -> P = 1, R = 1/2
  //   n=3: the hypothesis has no 3-grams -> order not counted (nor 4..6)
  //   P = 1, R = (2/3 + 1/2) / 2 = 7/12
  //   F2 = 5 P R / (4 P + R) = (35/12) / (55/12) = 7/11
  CHECK(sentence_chrf("ab", "abc") == Approx(700.0 / 11.0));
  // Swapping roles swaps P and R: P = 7/12, R = 1 -> F2 = (35/12) / (28/12 + 1) = 35/40.
  CHECK(sentence_chrf("abc", "ab") == Approx(87.5));
  // beta = 1: F1 = 2 P R / (P + R) = (14/12) / (19/12) = 14/19.
  CHECK(sentence_chrf("ab", "abc", {.beta = 1.0}) == Approx(1400.0 / 19.0));
}

TEST_CASE("chrF: corpus level sums statistics before scoring", "[data][metrics]") {
  // hyps {"abc", "x"}, refs {"abd", "x"}:
  //   n=1: hyp 4, ref 4, match 3 (a, b, x)   -> 3/4
  //   n=2: hyp 2 (ab, bc), ref 2 (ab, bd), match 1 -> 1/2
  //   n=3: hyp 1, ref 1, match 0              -> 0
  //   P = R = (3/4 + 1/2 + 0) / 3 = 5/12 -> F2 = 5/12
  CHECK(chrf({"abc", "x"}, {"abd", "x"}) == Approx(500.0 / 12.0));
  // which is not the mean of the sentence scores (38.9 and 100).
  CHECK(sentence_chrf("abc", "abd") == Approx(700.0 / 18.0));
  CHECK_THROWS_WITH(chrf({"a"}, {}), Contains("1 hypotheses but 0 references"));
}

TEST_CASE("chrF: a sentence's hypothesis n-grams count only where its reference has some",
          "[data][metrics]") {
  // hyps {"abcd", "xyz"}, refs {"abcd", "xy"}: "xy" has no 3- or 4-grams, so
  // "xyz"'s one 3-gram is not counted (sacreBLEU's rule):
  //   n=1: P = 6/7, R = 1; n=2: P = 4/5, R = 1; n=3, n=4: P = R = 1 (from "abcd" only)
  //   P = (6/7 + 4/5 + 1 + 1) / 4 = 32/35 -> F2 = 5 P / (4 P + 1) = 160/163
  // sacreBLEU 2.6.0's CHRF().corpus_score gives 98.159509202454.
  CHECK(chrf({"abcd", "xyz"}, {"abcd", "xy"}) == Approx(16000.0 / 163.0));
  // Short iso-codes names: sacreBLEU gives 83.8235294117647.
  CHECK(chrf({"Siwi languages", "Tetum"}, {"Siwi", "Tetum"}) == Approx(83.8235294117647));
}

TEST_CASE("chrF: characters are code points, not bytes", "[data][metrics]") {
  // hyp "éa" vs ref "ea": n=1 match {a}: P = R = 1/2; n=2: 0 -> P = R = 1/4.
  CHECK(sentence_chrf("éa", "ea") == Approx(25.0));
  CHECK(sentence_chrf("日本", "日本") == Approx(100.0));
}

TEST_CASE("accuracy: argmax over the last axis, with an ignored label", "[data][metrics]") {
  Tensor logits = Tensor::from_vector(std::vector<float>{0.1f, 0.9f, 0.0f,   // -> 1
                                                         2.0f, 1.0f, 0.0f,   // -> 0
                                                         0.0f, 0.0f, 3.0f,   // -> 2
                                                         1.0f, 1.0f, 0.0f},  // tie -> 0
                                      Shape{4, 3});
  Tensor labels = Tensor::from_vector(std::vector<int64_t>{1, 1, 2, 0}, Shape{4});
  CHECK(accuracy(logits, labels) == Approx(0.75));
  AccuracyCount c = count_correct(logits, labels, /*ignore_index=*/1);
  CHECK(c.correct == 2);
  CHECK(c.total == 2);
  // Token accuracy: [B, T, V] float64 logits, [B, T] int32 labels, PAD = 0 ignored.
  Tensor tokens = Tensor::from_vector(logits.to_vector<double>(), Shape{2, 2, 3});
  Tensor targets = Tensor::from_vector(std::vector<int32_t>{1, 1, 2, 0}, Shape{2, 2});
  CHECK(accuracy(tokens, targets, /*ignore_index=*/0) == Approx(2.0 / 3.0));
  CHECK_THROWS_WITH(accuracy(logits, Tensor::from_vector(std::vector<int64_t>{1, 1}, Shape{2})),
                    Contains("do not match"));
}
