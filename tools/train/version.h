// gpipe's version and the commit a binary was built from (`--version` on
// every tool, the first line of a run's log, the metrics file).
#pragma once

#include <string>

namespace gpipe {

// "0.4.0"
const char* version();
// The git commit of the tree the binary was built from ("1a2b3c4d5e6f",
// "...-dirty" with uncommitted changes), or "unknown" when built outside a
// checkout or without the workspace status command (tools/workspace_status.sh).
const char* build_commit();
// "<tool> 0.4.0 (commit 1a2b3c4d5e6f)"
std::string version_line(const std::string& tool);

// If `--version` is among the arguments: prints version_line(tool) and
// returns true (the tool then exits 0, whatever else was given).
bool print_version_if_asked(int argc, char** argv, const std::string& tool);

}  // namespace gpipe
