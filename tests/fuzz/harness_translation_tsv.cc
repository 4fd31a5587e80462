// Fuzz harness: a source<TAB>target translation file parsed by parse_translation_tsv.
#include "data/translation_tsv.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpipe::fuzz::refusing_bad_input(
      [&] { (void)gpipe::parse_translation_tsv(gpipe::fuzz::bytes(data, size), "fuzz.tsv"); });
  return 0;
}
