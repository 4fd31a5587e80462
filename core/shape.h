// Shape: the sizes of a tensor's dimensions, and the row-major strides that
// go with them. Negative axes count from the back, as in numpy.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/cxx_version.h"

namespace gpipe {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  int64_t operator[](int64_t i) const { return dims_[i]; }
  int64_t& operator[](int64_t i) { return dims_[i]; }
  // Size of axis `axis`, which may be negative; throws gpipe::Error if out of range.
  int64_t size(int64_t axis) const;
  int64_t numel() const;
  const std::vector<int64_t>& dims() const { return dims_; }
  std::vector<int64_t> contiguous_strides() const;
  // Maps a possibly negative axis into [0, rank); throws naming `op` if out of range.
  int64_t normalize_axis(int64_t axis, const char* op = "axis") const;

  auto begin() const { return dims_.begin(); }
  auto end() const { return dims_.end(); }
  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }
  std::string str() const;
  // "[1, 2]": the multi-index of flat (row-major) position `flat` in this shape.
  std::string position_str(int64_t flat) const;

 private:
  std::vector<int64_t> dims_;
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

// A contiguous tensor seen as [outer, n, inner] around one axis (reductions,
// softmax): outer = product of the dims before `axis`, n = its size, inner =
// product of the dims after it. `axis` must already be in [0, rank).
struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};
inline AxisView axis_view(const Shape& s, int64_t axis) {
  AxisView v;
  for (int64_t i = 0; i < axis; ++i) v.outer *= s[i];
  v.n = s[axis];
  for (int64_t i = axis + 1; i < s.rank(); ++i) v.inner *= s[i];
  return v;
}

// The product of max(d, 1) over `dims`: the element count of the shape with
// its empty axes counted as 1, which bounds every contiguous stride as well as
// numel. nullopt when a size is negative or the product passes `limit`.
// Parsers of untrusted headers (messages, safetensors, IDX) check sizes with it
// before building a Shape: checking numel alone lets a zero-sized axis hide
// sizes whose strides overflow.
std::optional<int64_t> bounded_extent(const std::vector<int64_t>& dims, int64_t limit);

// numpy broadcasting of two shapes; throws gpipe::Error naming `op` if they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace gpipe
