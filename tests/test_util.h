// Helpers shared by tests in several folders: scratch directories and files
// under Bazel's TEST_TMPDIR.
#pragma once

#include <functional>
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

// Runs `body` in a forked child (for limits lowered there only) and returns
// its exit status: body's return value, 99 if it threw (the message goes to
// stderr), 128 + N if signal N ended it.
int run_in_child(const std::function<int()>& body);
// 0 if `ok`, else 1 after printing `what` to stderr: a child's check.
int child_check(bool ok, const std::string& what);
// The kernel does not hold root to RLIMIT_NPROC: a child that must meet it
// becomes the unprivileged user "nobody" first. false if it cannot.
bool drop_root_in_child();

}  // namespace gpipe::testing
