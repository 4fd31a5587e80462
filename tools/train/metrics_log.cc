#include "tools/train/metrics_log.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "data/metrics.h"

namespace gpipe::train {

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  char esc[8];
  for (char32_t cp : decode_utf8(s)) {
    if (cp == '"' || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp < 0x20 || (cp >= 0xdc80 && cp <= 0xdcff)) {
      // Control characters, and invalid UTF-8 bytes as Python's surrogateescape
      // reads them back (decode_utf8 never yields a surrogate for valid text).
      std::snprintf(esc, sizeof(esc), "\\u%04x", static_cast<unsigned>(cp));
      out += esc;
    } else if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  return out + "\"";
}

void JsonLine::key(std::string_view k) {
  if (!body_.empty()) body_ += ",";
  body_ += json_string(k) + ":";
}

JsonLine& JsonLine::add(std::string_view k, double value) {
  key(k);
  body_ += json_number(value);
  return *this;
}

JsonLine& JsonLine::add(std::string_view k, int64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}

JsonLine& JsonLine::add(std::string_view k, bool value) {
  key(k);
  body_ += value ? "true" : "false";
  return *this;
}

JsonLine& JsonLine::add(std::string_view k, std::string_view value) {
  key(k);
  body_ += json_string(value);
  return *this;
}

JsonLine& JsonLine::add(std::string_view k, const std::vector<double>& values) {
  key(k);
  body_ += "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) body_ += ',';
    body_ += json_number(values[i]);
  }
  body_ += "]";
  return *this;
}

JsonLine& JsonLine::add_json(std::string_view k, std::string_view json) {
  key(k);
  body_ += json;
  return *this;
}

MetricsLog::MetricsLog(const std::string& path, bool append)
    : out_(path, append ? std::ios::app : std::ios::trunc) {
  GPIPE_CHECK(out_.is_open(), "--metrics: cannot open '", path, "' for writing");
}

void MetricsLog::write(const JsonLine& line) {
  if (!out_.is_open()) return;
  out_ << line.str() << '\n';
  out_.flush();
}

}  // namespace gpipe::train
