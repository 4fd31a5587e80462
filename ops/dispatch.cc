#include "ops/dispatch.h"

#include <algorithm>
#include <mutex>
#include <set>

namespace gpipe::ops {
namespace {
struct Names {
  std::mutex mu;
  std::set<std::string> names[kNumDeviceTypes];
  std::set<std::string> optional;
};
Names& names() {
  static Names* n = new Names;
  return *n;
}
}  // namespace

void note_kernel(const char* name, DeviceType type) {
  Names& n = names();
  std::lock_guard<std::mutex> lock(n.mu);
  n.names[static_cast<int>(type)].insert(name);
}

void note_optional_kernel(const char* name) {
  Names& n = names();
  std::lock_guard<std::mutex> lock(n.mu);
  n.optional.insert(name);
}

bool is_optional_kernel(const std::string& name) {
  Names& n = names();
  std::lock_guard<std::mutex> lock(n.mu);
  return n.optional.count(name) > 0;
}

std::vector<std::string> registered_kernels(DeviceType type) {
  Names& n = names();
  std::lock_guard<std::mutex> lock(n.mu);
  const auto& s = n.names[static_cast<int>(type)];
  return {s.begin(), s.end()};
}

}  // namespace gpipe::ops
