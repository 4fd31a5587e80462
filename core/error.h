// Errors: one typed exception for user mistakes, one for our own bugs.
//
// GPIPE_CHECK(cond, parts...) throws gpipe::Error with the streamed parts as
// its message; use it for anything a user can get wrong (shapes, dtypes,
// flags, files). GPIPE_ASSERT(cond, parts...) throws gpipe::InternalError and
// marks a bug in gpipe itself; it stays on in optimised builds.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include "core/cxx_version.h"

namespace gpipe {

// A user error: bad shapes, dtypes, devices, flags, files. The message names
// the operation and the offending values.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A training step whose loss or gradients are not finite (NaN or Inf). The
// pipeline leaves no trace of the step (no gradients, no statistics), so a
// training loop may catch it and skip the step; across processes every rank
// throws it for the same step.
class NonFiniteError : public Error {
 public:
  using Error::Error;
};

// A bug in gpipe: an invariant that our own code should have kept.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
}  // namespace detail

}  // namespace gpipe

#define GPIPE_CHECK(cond, ...)                                               \
  do {                                                                       \
    if (!(cond)) throw ::gpipe::Error(::gpipe::detail::concat(__VA_ARGS__)); \
  } while (0)

#define GPIPE_ASSERT(cond, ...)                                                                  \
  do {                                                                                           \
    if (!(cond))                                                                                 \
      throw ::gpipe::InternalError(::gpipe::detail::concat("gpipe internal error at ", __FILE__, \
                                                           ":", __LINE__, ": ", #cond,           \
                                                           " " __VA_OPT__(, ) __VA_ARGS__));     \
  } while (0)
