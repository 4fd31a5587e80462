// Limits are read where Linux keeps them. The cgroup's are looked up along
// the process's cgroup path and every ancestor of it (a parent's limit binds
// its children too); a value of "max" is no limit.
#include "core/system_limits.h"

#include <dirent.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace gpipe {
namespace {

// The first line of `path`, or "" if it cannot be read.
std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

// The cgroup v2 directory of this process and its ancestors, innermost first;
// for v1, the directories of `controller`'s hierarchy.
std::vector<std::string> cgroup_dirs(const std::string& controller) {
  std::vector<std::string> dirs;
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // "hierarchy-ID:controller-list:path"
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    std::string root;
    if (controllers.empty())
      root = "/sys/fs/cgroup";  // v2 (unified)
    else if (("," + controllers + ",").find("," + controller + ",") != std::string::npos)
      root = "/sys/fs/cgroup/" + controller;  // v1
    else
      continue;
    while (true) {
      dirs.push_back(root + (path == "/" ? "" : path));
      if (path.empty() || path == "/") break;
      path = path.substr(0, path.rfind('/'));
      if (path.empty()) path = "/";
    }
  }
  return dirs;
}

void take_smaller(SystemLimit& limit, uint64_t value, const std::string& source) {
  if (value > 0 && (limit.value == 0 || value < limit.value)) limit = {value, source};
}

}  // namespace

SystemLimit usable_memory() {
  SystemLimit m;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0)
    take_smaller(m, static_cast<uint64_t>(pages) * static_cast<uint64_t>(page), "physical memory");
  for (const std::string& dir : cgroup_dirs("memory")) {
    for (const char* file : {"memory.max", "memory.limit_in_bytes"}) {
      const std::string v = first_line(dir + "/" + file);
      if (v.empty() || v == "max") continue;
      try {
        take_smaller(m, std::stoull(v), std::string("cgroup ") + file + " (" + dir + ")");
      } catch (const std::exception&) {  // not a number: not a limit
      }
    }
  }
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
    take_smaller(m, static_cast<uint64_t>(as.rlim_cur), "RLIMIT_AS (ulimit -v)");
  return m;
}

SystemLimit usable_cores() {
  SystemLimit c;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    take_smaller(c, static_cast<uint64_t>(CPU_COUNT(&set)), "the affinity mask");
  else
    take_smaller(c, static_cast<uint64_t>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))),
                 "online CPUs");
  for (const std::string& dir : cgroup_dirs("cpu")) {
    // v2: "quota period" or "max period"; v1: cpu.cfs_quota_us (-1: none) and cpu.cfs_period_us.
    double quota = -1, period = 0;
    std::istringstream v2(first_line(dir + "/cpu.max"));
    std::string q;
    if (v2 >> q >> period && q != "max") quota = std::atof(q.c_str());
    if (quota <= 0) {
      const std::string q1 = first_line(dir + "/cpu.cfs_quota_us");
      const std::string p1 = first_line(dir + "/cpu.cfs_period_us");
      if (!q1.empty() && !p1.empty()) quota = std::atof(q1.c_str()), period = std::atof(p1.c_str());
    }
    if (quota > 0 && period > 0)
      take_smaller(c, static_cast<uint64_t>(std::max(1.0, std::ceil(quota / period))),
                   "cgroup cpu quota (" + dir + ")");
  }
  if (c.value == 0) c = {1, "no CPU count readable"};
  return c;
}

SystemLimit process_limit() {
  rlimit np{};
  if (getrlimit(RLIMIT_NPROC, &np) == 0 && np.rlim_cur != RLIM_INFINITY)
    return {static_cast<uint64_t>(np.rlim_cur), "RLIMIT_NPROC (ulimit -u)"};
  return {0, "RLIMIT_NPROC (ulimit -u)"};
}

int64_t user_threads_now() {
  const std::string uid = std::to_string(getuid());
  int64_t threads = 0;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return 0;
  while (dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/status");
    std::string line;
    bool mine = false;
    while (std::getline(in, line)) {
      if (line.rfind("Uid:", 0) == 0) {
        std::istringstream fields(line.substr(4));
        std::string real;
        fields >> real;
        mine = real == uid;
      } else if (mine && line.rfind("Threads:", 0) == 0) {
        threads += std::atoll(line.c_str() + 8);
        break;
      }
    }
  }
  closedir(proc);
  return threads;
}

namespace {
std::atomic<FreeMemoryQuery> g_free_memory[4] = {};
}  // namespace

void register_free_memory_query(int device_type, FreeMemoryQuery query) {
  if (device_type >= 0 && device_type < 4) g_free_memory[device_type] = query;
}

SystemLimit device_free_memory(int device_type, int index, const std::string& device_name) {
  const FreeMemoryQuery q =
      device_type >= 0 && device_type < 4 ? g_free_memory[device_type].load() : nullptr;
  if (q == nullptr) return {0, device_name + ": no free-memory query (built without its runtime)"};
  return {q(index), device_name + "'s free memory"};
}

}  // namespace gpipe
