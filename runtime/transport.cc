#include "runtime/transport.h"

#include "core/autograd.h"

namespace gpipe {

void InProcessTransport::send(int m, Message msg) {
  {
    NoGradGuard no_grad;
    MemoryCategoryGuard cat(MemoryCategory::kActivation);
    for (Tensor& t : msg.tensors) {
      if (!t.defined()) continue;
      if (t.device() != dst_) bytes_sent_ += static_cast<int64_t>(t.nbytes());
      t = t.device() == dst_ ? t.detach() : t.to(dst_).detach();
    }
  }
  ++messages_sent_;
  box_.put(m, std::move(msg));
}

}  // namespace gpipe
