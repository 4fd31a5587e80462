#include "ops/dispatch.h"

#include <algorithm>
#include <mutex>
#include <set>

namespace gpipe::ops {
namespace {
struct Names {
  std::mutex mu;
  std::set<std::string> names[kNumDeviceTypes];
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

std::vector<std::string> registered_kernels(DeviceType type) {
  Names& n = names();
  std::lock_guard<std::mutex> lock(n.mu);
  const auto& s = n.names[static_cast<int>(type)];
  return {s.begin(), s.end()};
}

}  // namespace gpipe::ops
