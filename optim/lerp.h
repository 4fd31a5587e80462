// lerp as PyTorch's CPU kernel rounds it, so moving averages written as
// torch.lerp_ in torch.optim round the same way here.
#pragma once

namespace gpipe::optim {

// a + w * (b - a), evaluated from the nearer end for accuracy.
template <class T>
inline T lerp(T a, T b, T w) {
  return w < T(0.5) ? a + w * (b - a) : b - (b - a) * (T(1) - w);
}

}  // namespace gpipe::optim
