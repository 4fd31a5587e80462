#include "optim/loss_scaler.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace gpipe::optim {

LossScaler::LossScaler(LossScalerOptions options) : o_(options), scale_(options.initial_scale) {
  GPIPE_CHECK(std::isfinite(o_.initial_scale) && o_.initial_scale > 0,
              "loss scaler: the initial scale must be positive and finite, got ", o_.initial_scale);
  GPIPE_CHECK(o_.growth >= 1 && o_.backoff > 0 && o_.backoff < 1,
              "loss scaler: expected growth >= 1 and 0 < backoff < 1, got ", o_.growth, " and ",
              o_.backoff);
  GPIPE_CHECK(o_.growth_interval >= 1, "loss scaler: the growth interval must be >= 1 step, got ",
              o_.growth_interval);
  GPIPE_CHECK(o_.min_scale > 0 && o_.min_scale <= o_.max_scale,
              "loss scaler: expected 0 < min_scale <= max_scale, got ", o_.min_scale, " and ",
              o_.max_scale);
}

bool LossScaler::update(bool finite) {
  if (!finite) {
    scale_ = std::max(o_.min_scale, scale_ * o_.backoff);
    good_steps_ = 0;
    return false;
  }
  if (++good_steps_ >= o_.growth_interval) {
    scale_ = std::min(o_.max_scale, scale_ * o_.growth);
    good_steps_ = 0;
  }
  return true;
}

void LossScaler::save(std::map<std::string, std::string>& metadata,
                      const std::string& prefix) const {
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", scale_);
  metadata[prefix + "scale"] = text;
  metadata[prefix + "good_steps"] = std::to_string(good_steps_);
}

void LossScaler::load(const std::map<std::string, std::string>& metadata,
                      const std::string& prefix) {
  auto value = [&](const std::string& key) -> const std::string& {
    auto it = metadata.find(prefix + key);
    GPIPE_CHECK(it != metadata.end(), "loss scaler: the checkpoint has no '", prefix + key,
                "' (saved without float16 loss scaling?)");
    return it->second;
  };
  const std::string& s = value("scale");
  char* end = nullptr;
  const double scale = std::strtod(s.c_str(), &end);
  GPIPE_CHECK(!s.empty() && *end == '\0' && std::isfinite(scale) && scale > 0, "loss scaler: '",
              prefix, "scale' is '", s, "', expected a positive number");
  const std::string& g = value("good_steps");
  const long long good = std::strtoll(g.c_str(), &end, 10);
  GPIPE_CHECK(!g.empty() && *end == '\0' && good >= 0, "loss scaler: '", prefix, "good_steps' is '",
              g, "', expected a count >= 0");
  scale_ = scale;
  good_steps_ = good;
}

}  // namespace gpipe::optim
