// Dynamic loss scaling for float16 training (Note [Mixed precision] in
// core/precision.h).
//
// float16 gradients underflow below 6e-8 and overflow above 65504. The loss
// is multiplied by a scale S before backward, so every gradient is S times
// larger (and representable); the float32 master gradients are divided by S
// before clipping and the update. When a step's gradients are not finite
// (overflow), the step is skipped and S is multiplied by `backoff`; after
// `growth_interval` finite steps in a row S is multiplied by `growth`.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace gpipe::optim {

struct LossScalerOptions {
  double initial_scale = 65536.0;  // 2^16
  double growth = 2.0;
  double backoff = 0.5;
  int64_t growth_interval = 2000;  // finite steps in a row before S grows
  double min_scale = 1.0;          // S never drops below (a run stuck there overflows in float32)
  double max_scale = 16777216.0;   // 2^24
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});

  double scale() const { return scale_; }
  // Finite steps since the last change of the scale.
  int64_t good_steps() const { return good_steps_; }
  // After a step's backward: whether its (unscaled) gradients were finite.
  // Returns true when the step may be applied; false means skip it (the
  // scale has backed off).
  bool update(bool finite);

  // State for a checkpoint's metadata ("<prefix>scale", "<prefix>good_steps",
  // exact decimal text) and back; a resumed run continues exactly. Throws
  // gpipe::Error naming a malformed or missing value.
  void save(std::map<std::string, std::string>& metadata, const std::string& prefix) const;
  void load(const std::map<std::string, std::string>& metadata, const std::string& prefix);

 private:
  LossScalerOptions o_;
  double scale_;
  int64_t good_steps_ = 0;
};

}  // namespace gpipe::optim
