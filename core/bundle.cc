#include "core/bundle.h"

#include <sstream>

namespace gpipe {

BundleSpec spec_of(const Bundle& b) {
  BundleSpec s;
  for (const Tensor& t : b) s.push_back({t.shape(), t.dtype()});
  return s;
}

std::string to_string(const BundleSpec& spec) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < spec.size(); ++i) os << (i ? ", " : "") << spec[i].dtype << spec[i].shape;
  os << ")";
  return os.str();
}

}  // namespace gpipe
