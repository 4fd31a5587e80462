#include "pipeline/remat.h"

#include "core/error.h"

namespace gpipe {

RematMode parse_remat(const std::string& name) {
  if (name == "always") return RematMode::kAlways;
  if (name == "except_last" || name == "except-last") return RematMode::kExceptLast;
  if (name == "never") return RematMode::kNever;
  throw Error(
      detail::concat("unknown remat mode '", name, "' (expected always, except_last or never)"));
}

std::string remat_name(RematMode mode) {
  switch (mode) {
    case RematMode::kAlways:
      return "always";
    case RematMode::kExceptLast:
      return "except_last";
    case RematMode::kNever:
      return "never";
  }
  return "?";
}

}  // namespace gpipe
