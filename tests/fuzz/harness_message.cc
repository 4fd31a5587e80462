// Fuzz harness: the bytes one rank sends another (runtime/communicator.h),
// as a whole message (header and payloads) through deserialize_message onto
// the CPU: the header's form is checked, then the payload's length against
// it, before anything is allocated. decode_header runs the same checks and
// then allocates what the header describes (a transport receives the
// payload into it), so it is not called here: a valid header of a 16 GB
// tensor is a 16 GB allocation by design, not a bug.
#include "runtime/communicator.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(gpipe::fuzz::bytes(data, size));
  gpipe::fuzz::refusing_bad_input([&] { (void)gpipe::deserialize_message(bytes, gpipe::kCpu); });
  return 0;
}
