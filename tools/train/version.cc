// The commit comes from the stamped genrule :commit_stamp (tools/train/BUILD),
// which reads Bazel's stable-status.txt.
#include "tools/train/version.h"

#include <cstdio>
#include <string_view>

#include "tools/train/commit_stamp.inc"  // defines kGpipeCommit

namespace gpipe {

// The release this tree is; raised with each release's notes in README.md.
const char* version() { return "0.4.0"; }

const char* build_commit() { return kGpipeCommit[0] != '\0' ? kGpipeCommit : "unknown"; }

std::string version_line(const std::string& tool) {
  return tool + " " + version() + " (commit " + build_commit() + ")";
}

bool print_version_if_asked(int argc, char** argv, const std::string& tool) {
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--version") {
      std::printf("%s\n", version_line(tool).c_str());
      return true;
    }
  return false;
}

}  // namespace gpipe
