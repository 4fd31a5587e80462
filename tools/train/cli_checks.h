// CLI11 validators for the tools' numeric flags, with messages that say
// what was expected and what was given ("--batch: expected a positive
// number, got 0"), instead of CLI11's "Value 0 not in range 0.000000 to
// 1.79769e+308".
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <string>

namespace gpipe::train {

namespace cli_detail {
// The flag's text as a finite number, or an error message.
inline std::string number_check(const std::string& text, bool allow_zero) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const char* expected = allow_zero ? "a number >= 0" : "a positive number";
  if (text.empty() || end == text.c_str() || *end != '\0' || !std::isfinite(v))
    return std::string("expected ") + expected + ", got '" + text + "'";
  if (v < 0 || (!allow_zero && v == 0))
    return std::string("expected ") + expected + ", got " + text;
  return "";
}
}  // namespace cli_detail

// > 0 (counts, sizes, rates).
inline const CLI::Validator kPositive(
    [](std::string& s) { return cli_detail::number_check(s, false); }, "POSITIVE", "positive");
// >= 0 (0 meaning "none" or "off").
inline const CLI::Validator kNonNegative(
    [](std::string& s) { return cli_detail::number_check(s, true); }, "NONNEGATIVE",
    "non-negative");

// A probability in [0, 1) (dropout rates: "expected a probability in [0, 1), got '1.5'").
inline const CLI::Validator kProbability(
    [](std::string& s) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(s.c_str(), &end);
      if (s.empty() || end == s.c_str() || *end != '\0' || !(v >= 0 && v < 1))
        return "expected a probability in [0, 1), got '" + s + "'";
      return "";
    },
    "PROBABILITY", "probability");

// A whole number in [lo, hi] ("--K: expected a whole number from 1 to 16, got '0'").
inline CLI::Validator int_range(long lo, long hi) {
  const std::string range = std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        char* end = nullptr;
        const long v = std::strtol(s.c_str(), &end, 10);
        if (s.empty() || end == s.c_str() || *end != '\0' || v < lo || v > hi)
          return "expected a whole number from " + range + ", got '" + s + "'";
        return "";
      },
      "INT in " + range, "int_range");
}

// A flag's old spelling, refused with its new name ("--partitions was
// renamed: use --K"); hidden from --help.
inline void add_renamed_flag(CLI::App* app, const std::string& old_name,
                             const std::string& new_name) {
  const std::string message = old_name + " was renamed: use " + new_name;
  app->add_option(
         old_name,
         [message](const CLI::results_t&) -> bool { throw CLI::ValidationError(message); }, message)
      ->group("");
}

}  // namespace gpipe::train
