// Helpers shared by gpipe_train's flag parsing (flags.cc) and checking
// (config.cc): usage errors that name the flag, and the default budgets.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tools/train/config.h"

namespace gpipe::train {

inline constexpr int64_t kDefaultStepsTransformer = 600;
inline constexpr int64_t kDefaultEpochsAmoebaNet = 2;

// Throws UsageError(parts...) unless `ok`.
template <class... Parts>
void usage(bool ok, const Parts&... parts) {
  if (!ok) throw UsageError(detail::concat(parts...));
}

// Runs `f`, turning a gpipe::Error into a UsageError naming `flag`.
template <class F>
void check_flag(const char* flag, F&& f) {
  try {
    f();
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(detail::concat(flag, ": ", e.what()));
  }
}

inline bool all_digits(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](unsigned char ch) { return std::isdigit(ch); });
}

inline std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

}  // namespace gpipe::train
