// Fuzz harness: a gettext .mo catalog parsed by parse_mo.
#include "data/mo_file.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpipe::fuzz::refusing_bad_input(
      [&] { (void)gpipe::parse_mo(gpipe::fuzz::bytes(data, size), "fuzz.mo"); });
  return 0;
}
