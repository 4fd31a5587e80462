// Fuzz harness: gpipe_train's command line. The input is split at newlines
// into arguments (without the program name) and parsed and validated by
// train::parse_train_flags, as gpipe_train does before anything runs. --help
// is accepted (HelpRequested). Arguments naming files (--schedule=file:,
// --checkpoint, --data-dir, ...) are dropped so the harness never reads the
// machine's files; their readers have harnesses of their own.
#include <string>
#include <vector>

#include "tests/fuzz/fuzz.h"
#include "tools/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  for (std::string& a : gpipe::fuzz::split_lines(gpipe::fuzz::bytes(data, size), 64)) {
    if (!gpipe::fuzz::names_file(a)) args.push_back(std::move(a));
  }
  try {
    gpipe::fuzz::refusing_bad_input([&] { (void)gpipe::train::parse_train_flags(args); });
  } catch (const gpipe::train::HelpRequested&) {
  }
  return 0;
}
