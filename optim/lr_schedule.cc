// Learning-rate schedules and their "name:key=value,..." parser.
//
// The parser is table-driven: each schedule lists its keys (required or with
// a default) and a factory, so an error can always list what is allowed.
#include "optim/lr_schedule.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <numbers>
#include <vector>

#include "core/error.h"
#include "optim/format.h"

namespace gpipe::optim {
namespace {

void check_base(double base, const char* schedule) {
  GPIPE_CHECK(std::isfinite(base) && base >= 0, schedule, " schedule: base lr must be >= 0, got ",
              format_double(base));
}

void check_step(int64_t step, const char* schedule) {
  GPIPE_CHECK(step >= 1, schedule, " schedule: steps are 1-based, got lr_at(", step, ")");
}

}  // namespace

ConstantLr::ConstantLr(double base) : base_(base) { check_base(base, "constant"); }
double ConstantLr::lr_at(int64_t step) const {
  check_step(step, "constant");
  return base_;
}
std::string ConstantLr::str() const { return "constant"; }

InverseSqrtLr::InverseSqrtLr(double base, int64_t warmup) : base_(base), warmup_(warmup) {
  check_base(base, "inverse_sqrt");
  GPIPE_CHECK(warmup >= 1, "inverse_sqrt schedule: warmup must be >= 1, got ", warmup);
}
double InverseSqrtLr::lr_at(int64_t step) const {
  check_step(step, "inverse_sqrt");
  const double s = static_cast<double>(step), w = static_cast<double>(warmup_);
  return base_ * std::min(s / w, std::sqrt(w / s));
}
std::string InverseSqrtLr::str() const { return detail::concat("inverse_sqrt:warmup=", warmup_); }

NoamLr::NoamLr(double base, int64_t d_model, int64_t warmup)
    : base_(base), d_model_(d_model), warmup_(warmup) {
  check_base(base, "noam");
  GPIPE_CHECK(d_model >= 1, "noam schedule: d_model must be >= 1, got ", d_model);
  GPIPE_CHECK(warmup >= 1, "noam schedule: warmup must be >= 1, got ", warmup);
}
double NoamLr::lr_at(int64_t step) const {
  check_step(step, "noam");
  const double s = static_cast<double>(step), w = static_cast<double>(warmup_);
  return base_ / std::sqrt(static_cast<double>(d_model_)) *
         std::min(1.0 / std::sqrt(s), s * std::pow(w, -1.5));
}
std::string NoamLr::str() const {
  return detail::concat("noam:d_model=", d_model_, ",warmup=", warmup_);
}

CosineLr::CosineLr(double base, int64_t warmup, int64_t total, double floor)
    : base_(base), warmup_(warmup), total_(total), floor_(floor) {
  check_base(base, "cosine");
  GPIPE_CHECK(warmup >= 0, "cosine schedule: warmup must be >= 0, got ", warmup);
  GPIPE_CHECK(total > warmup, "cosine schedule: total (", total, ") must exceed warmup (", warmup,
              ")");
  GPIPE_CHECK(std::isfinite(floor) && floor >= 0 && floor <= base,
              "cosine schedule: floor must be in [0, base lr ", format_double(base), "], got ",
              format_double(floor));
}
double CosineLr::lr_at(int64_t step) const {
  check_step(step, "cosine");
  if (step <= warmup_) return base_ * static_cast<double>(step) / static_cast<double>(warmup_);
  if (step >= total_) return floor_;
  const double progress =
      static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
  return floor_ + (base_ - floor_) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}
std::string CosineLr::str() const {
  return detail::concat("cosine:warmup=", warmup_, ",total=", total_,
                        ",floor=", format_double(floor_));
}

StepLr::StepLr(double base, int64_t every, double gamma)
    : base_(base), every_(every), gamma_(gamma) {
  check_base(base, "step");
  GPIPE_CHECK(every >= 1, "step schedule: every must be >= 1, got ", every);
  GPIPE_CHECK(std::isfinite(gamma) && gamma > 0, "step schedule: gamma must be > 0, got ",
              format_double(gamma));
}
double StepLr::lr_at(int64_t step) const {
  check_step(step, "step");
  return base_ * std::pow(gamma_, static_cast<double>((step - 1) / every_));
}
std::string StepLr::str() const {
  return detail::concat("step:every=", every_, ",gamma=", format_double(gamma_));
}

// --- parsing ---

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

struct KeySpec {
  std::string name;
  bool integer;
  const char* fallback;  // nullptr: required
};

struct ScheduleSpec {
  std::vector<KeySpec> keys;
  std::function<std::unique_ptr<LrSchedule>(double base, const std::map<std::string, double>&)>
      make;
};

const std::map<std::string, ScheduleSpec>& schedule_table() {
  static const auto* table = new std::map<std::string, ScheduleSpec>{
      {"constant", {{}, [](double b, const auto&) { return std::make_unique<ConstantLr>(b); }}},
      {"inverse_sqrt",
       {{{"warmup", true, nullptr}},
        [](double b, const auto& v) {
          return std::make_unique<InverseSqrtLr>(b, static_cast<int64_t>(v.at("warmup")));
        }}},
      {"noam",
       {{{"d_model", true, nullptr}, {"warmup", true, nullptr}},
        [](double b, const auto& v) {
          return std::make_unique<NoamLr>(b, static_cast<int64_t>(v.at("d_model")),
                                          static_cast<int64_t>(v.at("warmup")));
        }}},
      {"cosine",
       {{{"warmup", true, "0"}, {"total", true, nullptr}, {"floor", false, "0"}},
        [](double b, const auto& v) {
          return std::make_unique<CosineLr>(b, static_cast<int64_t>(v.at("warmup")),
                                            static_cast<int64_t>(v.at("total")), v.at("floor"));
        }}},
      {"step",
       {{{"every", true, nullptr}, {"gamma", false, "0.1"}},
        [](double b, const auto& v) {
          return std::make_unique<StepLr>(b, static_cast<int64_t>(v.at("every")), v.at("gamma"));
        }}},
  };
  return *table;
}

std::string known_schedules() {
  std::string out;
  for (const auto& [name, spec] : schedule_table()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

std::string allowed_keys(const ScheduleSpec& spec) {
  if (spec.keys.empty()) return "none";
  std::string out;
  for (const KeySpec& k : spec.keys) out += (out.empty() ? "" : ", ") + k.name;
  return out;
}

// Parses `text` as the value of `key`: an integer or any finite number.
double parse_value(std::string_view text, const KeySpec& key, std::string_view spec) {
  const char* end = text.data() + text.size();
  if (key.integer) {
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(text.data(), end, v);
    GPIPE_CHECK(ec == std::errc() && ptr == end && !text.empty(), "lr schedule '", spec,
                "': ", key.name, " must be an integer, got '", text, "'");
    return static_cast<double>(v);
  }
  double v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  GPIPE_CHECK(ec == std::errc() && ptr == end && !text.empty() && std::isfinite(v), "lr schedule '",
              spec, "': ", key.name, " must be a number, got '", text, "'");
  return v;
}

}  // namespace

std::unique_ptr<LrSchedule> parse_lr_schedule(std::string_view spec, double base_lr) {
  const std::string_view text = trim(spec);
  const size_t colon = text.find(':');
  const std::string name(trim(text.substr(0, colon)));
  const auto& table = schedule_table();
  auto it = table.find(name);
  GPIPE_CHECK(it != table.end(), "lr schedule '", spec, "': unknown schedule '", name,
              "' (known: ", known_schedules(), ")");
  const ScheduleSpec& schedule = it->second;

  std::map<std::string, double> values;
  if (colon != std::string_view::npos) {
    std::string_view rest = text.substr(colon + 1);
    while (true) {
      const size_t comma = rest.find(',');
      const std::string_view item = trim(rest.substr(0, comma));
      const size_t eq = item.find('=');
      GPIPE_CHECK(eq != std::string_view::npos, "lr schedule '", spec,
                  "': expected key=value, got '", item, "'");
      const std::string key(trim(item.substr(0, eq)));
      const KeySpec* ks = nullptr;
      for (const KeySpec& k : schedule.keys)
        if (k.name == key) ks = &k;
      GPIPE_CHECK(ks != nullptr, "lr schedule '", spec, "': unknown key '", key, "' for ", name,
                  " (allowed: ", allowed_keys(schedule), ")");
      GPIPE_CHECK(!values.count(key), "lr schedule '", spec, "': key '", key, "' given twice");
      values[key] = parse_value(trim(item.substr(eq + 1)), *ks, spec);
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
  }
  for (const KeySpec& k : schedule.keys) {
    if (values.count(k.name)) continue;
    GPIPE_CHECK(k.fallback != nullptr, "lr schedule '", spec, "': ", name, " needs ", k.name,
                "=... (keys: ", allowed_keys(schedule), ")");
    values[k.name] = parse_value(k.fallback, k, spec);
  }
  try {
    return schedule.make(base_lr, values);
  } catch (const Error& e) {
    throw Error(detail::concat("lr schedule '", spec, "': ", e.what()));
  }
}

}  // namespace gpipe::optim
