// Note [Stale temporaries]: a temporary file's name carries its writer's
// process id, and kill(pid, 0) tells whether that process still exists
// without signalling it. ESRCH means it does not, so nobody will rename the
// file any more and it can go. Anything else keeps the file: success (a live
// writer, perhaps saving this very path right now), EPERM (a live process of
// another user). A dead writer's id reused by an unrelated process keeps
// its file until that process ends too; erring that way never deletes a
// file someone is writing. Process ids are per host: on a folder shared
// between hosts, a live writer on another host would look dead, so sharded
// saves sweep only once all of their own writers have finished (see
// save_sharded_checkpoint), and two jobs saving one path from different
// hosts at once are not supported.
#include "optim/stale_temp.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <utility>

namespace gpipe::optim {
namespace {

constexpr const char kTmp[] = ".tmp.";

// The pid of "<target>.tmp.<pid>", or 0 when `name` is not of that form.
pid_t temporary_pid(const std::string& name, std::string& target) {
  const size_t at = name.rfind(kTmp);
  if (at == std::string::npos || at == 0) return 0;
  const std::string digits = name.substr(at + sizeof(kTmp) - 1);
  if (digits.empty() || digits.size() > 9 || digits[0] == '0') return 0;
  for (const char ch : digits)
    if (ch < '0' || ch > '9') return 0;
  target = name.substr(0, at);
  return static_cast<pid_t>(std::stol(digits));
}

bool process_is_gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace

std::string temporary_path(const std::string& path) {
  return path + kTmp + std::to_string(::getpid());
}

std::vector<std::string> remove_stale_temporaries(
    const std::string& dir, const std::function<bool(const std::string&)>& matches) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  std::error_code ec;
  fs::directory_iterator it(dir.empty() ? "." : dir, ec);
  const fs::directory_iterator end;
  if (ec) {
    std::fprintf(stderr, "warning: cannot list '%s' for stale temporary files: %s\n", dir.c_str(),
                 ec.message().c_str());
    return removed;
  }
  // Listed first, removed after: the listing is not disturbed by the removals.
  std::vector<std::pair<fs::path, pid_t>> stale;
  for (; !ec && it != end; it.increment(ec)) {
    std::string target;
    const pid_t pid = temporary_pid(it->path().filename().string(), target);
    if (pid > 0 && pid != ::getpid() && matches(target) && process_is_gone(pid))
      stale.emplace_back(it->path(), pid);
  }
  for (const auto& [file, pid] : stale) {
    std::error_code rm;
    if (!fs::remove(file, rm)) {
      if (rm)
        std::fprintf(stderr, "warning: cannot remove the stale temporary file '%s': %s\n",
                     file.c_str(), rm.message().c_str());
      continue;
    }
    std::fprintf(stderr,
                 "removed the stale temporary file '%s' of process %d, which is no longer "
                 "running\n",
                 file.c_str(), static_cast<int>(pid));
    removed.push_back(file.string());
  }
  return removed;
}

std::vector<std::string> remove_stale_temporaries(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string base = p.filename().string();
  return remove_stale_temporaries(p.parent_path().string(),
                                  [&](const std::string& target) { return target == base; });
}

}  // namespace gpipe::optim
