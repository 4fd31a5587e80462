// Fuzz harness: a schedule program (--schedule=file:PATH's text) parsed by
// parse_schedule_text, printed back and re-parsed (the round trip must give
// the same program), then validated (the dry run) for its own K and M.
#include <cstdlib>

#include "pipeline/schedule.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpipe::fuzz::refusing_bad_input([&] {
    const gpipe::Schedule s =
        gpipe::parse_schedule_text(std::string(gpipe::fuzz::bytes(data, size)), "fuzz");
    if (!(gpipe::parse_schedule_text(gpipe::to_text(s), "round trip") == s)) std::abort();
    (void)gpipe::validate(s, s.cells(), s.M);
  });
  return 0;
}
