#include "core/shape.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace gpipe {

int64_t Shape::normalize_axis(int64_t axis, const char* op) const {
  const int64_t r = rank();
  GPIPE_CHECK(axis >= -r && axis < r, op, ": axis ", axis,
              " is out of range for a tensor of shape ", *this, " (expected -", r, " <= axis < ", r,
              ")");
  return axis < 0 ? axis + r : axis;
}

int64_t Shape::size(int64_t axis) const { return dims_[normalize_axis(axis, "size")]; }

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

std::optional<int64_t> bounded_extent(const std::vector<int64_t>& dims, int64_t limit) {
  int64_t extent = 1;
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(extent, std::max<int64_t>(d, 1), &extent) || extent > limit)
      return std::nullopt;
  }
  return extent;
}

std::vector<int64_t> Shape::contiguous_strides() const {
  std::vector<int64_t> s(dims_.size());
  int64_t acc = 1;
  for (int64_t i = rank() - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= std::max<int64_t>(dims_[i], 1);
  }
  return s;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < dims_.size(); ++i) os << (i ? ", " : "") << dims_[i];
  os << ']';
  return os.str();
}

std::string Shape::position_str(int64_t flat) const {
  std::vector<int64_t> at(dims_.size());
  for (int64_t d = rank() - 1; d >= 0; --d) {
    at[d] = flat % dims_[d];
    flat /= dims_[d];
  }
  return Shape(std::move(at)).str();
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int64_t r = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(r);
  for (int64_t i = 0; i < r; ++i) {
    const int64_t ia = i - (r - a.rank()), ib = i - (r - b.rank());
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    GPIPE_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
                " do not broadcast (axis ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return Shape(std::move(out));
}

}  // namespace gpipe
