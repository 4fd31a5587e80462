// Temporary files of atomic saves, and the removal of those a killed writer
// left behind.
//
// save_safetensors writes "<path>.tmp.<pid>" and renames it over `path`
// (Note [Atomic save] in safetensors.cc). A writer killed before the rename
// (kill -9, a node lost) leaves its temporary file, and each restart that is
// killed the same way adds another. Note [Stale temporaries]: at the next
// save of the same path the temporaries whose process no longer exists are
// removed; a live process's file is never touched.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace gpipe::optim {

// "<path>.tmp.<pid of this process>".
std::string temporary_path(const std::string& path);

// Removes every file "<dir>/<target>.tmp.<pid>" with `matches(target)` true
// whose <pid> (all digits, > 0) is not a running process: kill(pid, 0) fails
// with ESRCH. This process's own files, other live processes' (also those of
// other users: EPERM) and names of any other form are kept. Prints one line
// per removed file to stderr ("removed the stale temporary file '<file>' of
// process <pid>, which is no longer running"); returns the removed paths. A
// file that cannot be removed or a folder that cannot be listed is skipped
// with a warning: the save it precedes goes on either way.
std::vector<std::string> remove_stale_temporaries(
    const std::string& dir, const std::function<bool(const std::string& target)>& matches);

// The temporaries of `path` itself: "<path>.tmp.<pid>".
std::vector<std::string> remove_stale_temporaries(const std::string& path);

}  // namespace gpipe::optim
