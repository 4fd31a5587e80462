// Fuzz harness: the JSON reader behind safetensors headers and the
// trainer's files (optim::json::parse).
#include "optim/json.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpipe::fuzz::refusing_bad_input(
      [&] { (void)gpipe::optim::json::parse(gpipe::fuzz::bytes(data, size)); });
  return 0;
}
