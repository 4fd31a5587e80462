// Fuzz harness: the bytes one rank sends another (runtime/communicator.h):
// decode_header on the input as a header, deserialize_message on it as a
// whole message (header and payloads), onto the CPU.
#include "runtime/communicator.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(gpipe::fuzz::bytes(data, size));
  gpipe::fuzz::refusing_bad_input([&] { (void)gpipe::decode_header(bytes, gpipe::kCpu); });
  gpipe::fuzz::refusing_bad_input([&] { (void)gpipe::deserialize_message(bytes, gpipe::kCpu); });
  return 0;
}
