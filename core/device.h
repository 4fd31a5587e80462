// Device: where a tensor's bytes live. "cpu:i" devices are real, independent
// pipeline devices (each with its own allocator statistics and, in the
// runtime, its own worker); "cuda:i" exists only in CUDA builds.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/cxx_version.h"

namespace gpipe {

enum class DeviceType : uint8_t { kCPU = 0, kCUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  Device() = default;
  constexpr Device(DeviceType t, int i) : type(t), index(i) {}
  // Parses "cpu", "cpu:3", "cuda:0"; throws gpipe::Error naming the text otherwise.
  explicit Device(std::string_view spec);

  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  std::string str() const;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

std::string_view device_type_name(DeviceType t);
std::ostream& operator<<(std::ostream& os, const Device& d);

// `count` devices of one kind, e.g. devices("cpu", 4) -> cpu:0..cpu:3.
std::vector<Device> devices(std::string_view kind, int count);

inline const Device kCpu{DeviceType::kCPU, 0};

}  // namespace gpipe
