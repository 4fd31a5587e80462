// What this process may take from the machine: memory, cores, threads.
//
// Each figure is the smallest of the limits that apply, with the name of the
// one that binds, so a refusal can say which limit to raise. Read from
// sysconf, getrlimit, sched_getaffinity and the process's cgroup (v2:
// memory.max, cpu.max; v1: memory.limit_in_bytes, cpu.cfs_quota_us), each
// read fresh on every call (a test lowers a limit in a child and reads again).
#pragma once

#include <cstdint>
#include <string>

#include "core/cxx_version.h"

namespace gpipe {

struct SystemLimit {
  uint64_t value = 0;  // 0: unknown (nothing could be read)
  std::string source;  // "physical memory", "cgroup memory.max", "RLIMIT_AS", ...
};

// Bytes of memory this process may use: min(physical memory, the cgroup's
// memory limit, RLIMIT_AS).
SystemLimit usable_memory();

// Cores this process may run on: min(the affinity mask's CPUs, the cgroup's
// cpu.max quota / period, rounded up), at least 1.
SystemLimit usable_cores();

// RLIMIT_NPROC (threads and processes of this user; 0 = unlimited), and how
// many of them exist now (threads of this user's processes in /proc; 0 if
// unreadable). The kernel does not hold root to this limit.
SystemLimit process_limit();
int64_t user_threads_now();

// An accelerator's free memory, asked of the hook its runtime installs
// (runtime/cuda under --config=cuda: cudaMemGetInfo). The query throws
// gpipe::Error for a device that is not there.
using FreeMemoryQuery = uint64_t (*)(int index);
void register_free_memory_query(int device_type, FreeMemoryQuery query);
// {free bytes, "cuda:0's free memory"}, or value 0 when no hook is installed.
SystemLimit device_free_memory(int device_type, int index, const std::string& device_name);

}  // namespace gpipe
