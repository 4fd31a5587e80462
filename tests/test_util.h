// Helpers shared by tests in several folders: scratch directories and files
// under Bazel's TEST_TMPDIR.
#pragma once

#include <string>
#include <string_view>

namespace gpipe::testing {

// A fresh, empty directory for this test case (under TEST_TMPDIR, or the
// system temp directory outside Bazel).
std::string scratch_dir(std::string_view name);
void write_file(const std::string& path, std::string_view bytes);
// Writes `bytes` gzip-compressed.
void write_gz(const std::string& path, std::string_view bytes);
std::string read_file(const std::string& path);

}  // namespace gpipe::testing
