#include "core/device.h"

#include <charconv>

#include "core/error.h"

namespace gpipe {

std::string_view device_type_name(DeviceType t) { return t == DeviceType::kCPU ? "cpu" : "cuda"; }

Device::Device(std::string_view spec) {
  const auto colon = spec.find(':');
  const std::string_view kind = spec.substr(0, colon);
  if (kind == "cpu") {
    type = DeviceType::kCPU;
  } else if (kind == "cuda") {
    type = DeviceType::kCUDA;
  } else {
    throw Error(detail::concat("invalid device '", spec, "': expected cpu, cpu:N, cuda or cuda:N"));
  }
  index = 0;
  if (colon != std::string_view::npos) {
    const std::string_view num = spec.substr(colon + 1);
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
    GPIPE_CHECK(ec == std::errc() && p == num.data() + num.size() && index >= 0 && !num.empty(),
                "invalid device '", spec, "': the index after ':' must be a non-negative integer");
  }
}

std::string Device::str() const {
  return std::string(device_type_name(type)) + ":" + std::to_string(index);
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

std::vector<Device> devices(std::string_view kind, int count) {
  GPIPE_CHECK(count > 0, "devices: count must be positive, got ", count);
  const Device first{std::string(kind)};
  std::vector<Device> out;
  for (int i = 0; i < count; ++i) out.emplace_back(first.type, i);
  return out;
}

}  // namespace gpipe
