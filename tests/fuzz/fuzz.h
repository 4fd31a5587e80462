// libFuzzer harnesses for what gpipe reads from outside: each
// harness_*.cc defines LLVMFuzzerTestOneInput for one reader or parser.
//
// Built two ways (tests/fuzz/BUILD):
//  - <name>_fuzzer: clang with -fsanitize=fuzzer,address,undefined under
//    --config=fuzz (tools/fuzz.sh, run by .ci/run for a fixed time each);
//  - <name>_replay_test: any compiler, in the ordinary suite: every file of
//    the harness's corpus (tests/fuzz/corpus/<name>/: valid files, the
//    malformed cases the unit tests know, and every input that ever found a
//    bug) goes through the harness once (replay_main.cc).
// A harness accepts gpipe::Error (the readers' one clear error for bad
// input) and nothing else: a crash, a sanitizer report, a hang, a leak or
// any other exception is a bug.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace gpipe::fuzz {

inline std::string_view bytes(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A private folder for this process (made once, removed at exit) and a file
// in it holding `contents`; returns the file's path. For readers that take
// a path.
std::string write_file(const std::string& name, std::string_view contents);
std::string scratch_dir();

// The input cut at newlines into at most `max` lines (a final line without a
// newline counts; an empty input is one empty line).
std::vector<std::string> split_lines(std::string_view text, size_t max);

// Whether a gpipe_train argument names a file or folder to read or write
// (--schedule=file:, --checkpoint, --data-dir, --trace, ...): the command-line
// harnesses drop those so they never touch the machine's files.
bool names_file(const std::string& arg);

// Runs f, accepting gpipe::Error (the expected refusal of bad input).
template <class F>
void refusing_bad_input(F&& f) {
  try {
    f();
  } catch (const gpipe::Error&) {
  }
}

}  // namespace gpipe::fuzz
