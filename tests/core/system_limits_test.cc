// The limits gpipe reads are the ones that apply (each lowered in a child
// process, then read there), and a thread the system refuses is an error
// naming the figure, not std::terminate or a hang.
#include "core/system_limits.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <functional>
#include <string>

#include "core/error.h"
#include "core/parallel.h"
#include "runtime/worker.h"
#include "tests/test_util.h"

using namespace gpipe;

namespace {

using testing::child_check;
using testing::drop_root_in_child;
using testing::run_in_child;

}  // namespace

TEST_CASE("system limits: RLIMIT_AS lowered in a child is the memory it may use") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizers reserve terabytes of address space: no RLIMIT_AS under them.
  WARN("built with a sanitizer: skipped");
  return;
#endif
  const SystemLimit before = usable_memory();
  REQUIRE(before.value > 0);
  CHECK(run_in_child([&] {
          const rlim_t limit = std::min<uint64_t>(before.value / 2, 3ull << 30);
          const rlimit as{limit, limit};
          if (setrlimit(RLIMIT_AS, &as) != 0) return 2;
          const SystemLimit now = usable_memory();
          return child_check(
              now.value == limit && now.source.find("RLIMIT_AS") != std::string::npos,
              "usable_memory() = " + std::to_string(now.value) + " from " + now.source);
        }) == 0);
}

TEST_CASE("system limits: RLIMIT_NPROC lowered in a child is the one read") {
  CHECK(run_in_child([] {
          const rlimit np{123, 123};
          if (setrlimit(RLIMIT_NPROC, &np) != 0) return 2;
          const SystemLimit now = process_limit();
          return child_check(
              now.value == 123 && now.source.find("RLIMIT_NPROC") != std::string::npos,
              "process_limit() = " + std::to_string(now.value));
        }) == 0);
  CHECK(user_threads_now() >= 1);  // this test's own thread at least
}

TEST_CASE("system limits: an affinity mask of one CPU is one usable core") {
  const SystemLimit all = usable_cores();
  CHECK(all.value >= 1);
  CHECK(run_in_child([] {
          cpu_set_t one;
          CPU_ZERO(&one);
          CPU_SET(sched_getcpu(), &one);
          if (sched_setaffinity(0, sizeof(one), &one) != 0) return 2;
          const SystemLimit now = usable_cores();
          return child_check(now.value == 1, "usable_cores() = " + std::to_string(now.value) +
                                                 " from " + now.source);
        }) == 0);
}

TEST_CASE("system limits: a thread the system refuses is an error naming the figure") {
  // In a child that may start no more threads: the pool and the device worker
  // throw gpipe::Error (a crash or a hang would fail the child instead).
  const int rc = run_in_child([] {
    if (!drop_root_in_child()) return 3;
    // Room for three more threads: the pool starts some, then one is refused
    // and the ones started must be stopped and joined.
    const rlim_t room = static_cast<rlim_t>(user_threads_now() + 3);
    const rlimit few{room, room};
    if (setrlimit(RLIMIT_NPROC, &few) != 0) return 2;
    int failures = 0;
    try {
      ThreadPool pool(64);
      failures += child_check(false, "ThreadPool(64) started under a low RLIMIT_NPROC");
    } catch (const Error& e) {
      failures += child_check(std::string(e.what()).find(
                                  "could not start thread 5 of a pool of 64") != std::string::npos,
                              std::string("message: ") + e.what());
    }
    try {
      DeviceWorker worker(Device(DeviceType::kCPU, 0), 8);
      failures += child_check(false, "DeviceWorker started under a low RLIMIT_NPROC");
    } catch (const Error& e) {
      failures += child_check(std::string(e.what()).find("could not start") != std::string::npos,
                              std::string("message: ") + e.what());
    }
    return failures;
  });
  if (rc == 3) {
    WARN("no unprivileged user to run as: skipped");
    return;
  }
  CHECK(rc == 0);
}
