#include "runtime/transport.h"

namespace gpipe {

Bundle InProcessTransport::send(const Bundle& bundle, Device dst) {
  NoGradGuard no_grad;
  MemoryCategoryGuard cat(MemoryCategory::kActivation);
  Bundle out;
  out.reserve(bundle.size());
  for (const Tensor& t : bundle) {
    if (!t.defined()) {
      out.push_back(t);
      continue;
    }
    if (t.device() != dst) bytes_sent_ += static_cast<int64_t>(t.nbytes());
    out.push_back(t.device() == dst ? t.detach() : t.to(dst).detach());
  }
  return out;
}

}  // namespace gpipe
