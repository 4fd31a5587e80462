// Number formatting shared by optim's messages and checkpoint metadata.
#pragma once

#include <charconv>
#include <string>

namespace gpipe::optim {

// The shortest text that reads back as exactly `v` ("0.1", "1e-08", "inf").
inline std::string format_double(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, ec == std::errc() ? end : buf);
}

}  // namespace gpipe::optim
