// The --metrics file: one JSON object per line, flushed as it is written so
// a running job can be followed (tail -f) or plotted.
//
//   {"type":"train","step":12,"loss":3.41,"lr":0.001,"examples_per_s":180.2,...}
//   {"type":"eval","step":200,"loss":1.92,"chrf":41.3,...}
//   {"type":"translation","step":200,"language":"fr","source":...,"reference":...,
//    "hypothesis":...}   (the transformer's final evaluation: every sentence it decoded)
//
// Doubles are written in their shortest exact form; NaN and infinities as null.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace gpipe::train {

class JsonLine {
 public:
  JsonLine& add(std::string_view key, double value);
  JsonLine& add(std::string_view key, int64_t value);
  JsonLine& add(std::string_view key, int value) { return add(key, static_cast<int64_t>(value)); }
  JsonLine& add(std::string_view key, bool value);
  JsonLine& add(std::string_view key, std::string_view value);
  JsonLine& add(std::string_view key, const char* value) {
    return add(key, std::string_view(value));
  }
  JsonLine& add(std::string_view key, const std::vector<double>& values);
  // `json` must already be valid JSON (a nested object or array).
  JsonLine& add_json(std::string_view key, std::string_view json);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(std::string_view k);
  std::string body_;
};

// Shortest text that reads back as exactly `v` ("null" if not finite).
std::string json_number(double v);
// A JSON string literal of `s`: quotes, backslashes and control characters
// escaped; valid UTF-8 as it is; each invalid byte b as "\udcXX", which
// Python's json reads back as the "surrogateescape" character of b (the
// character gpipe's chrF counts for it, data/metrics.h).
std::string json_string(std::string_view s);

class MetricsLog {
 public:
  MetricsLog() = default;  // disabled: write() does nothing
  // Opens `path` (truncating, or appending when `append`); throws
  // gpipe::Error "--metrics: cannot open '<path>' for writing" on failure.
  MetricsLog(const std::string& path, bool append);
  void write(const JsonLine& line);
  bool enabled() const { return out_.is_open(); }

 private:
  std::ofstream out_;
};

}  // namespace gpipe::train
