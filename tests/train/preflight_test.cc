// Fail fast (Note [Preflight] in tools/train/preflight.cc): a run that cannot
// fit, or that would start far more threads than the process may run, is
// refused by train() before anything is built, naming the figure; the run
// that fits still trains, also under lowered limits in a child process.
#include "tools/train/preflight.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>

#include "core/device.h"
#include "core/error.h"
#include "core/system_limits.h"
#include "tests/test_util.h"
#include "tests/train/trainer_testing.h"
#include "tools/train/config.h"
#include "tools/train/trainer.h"

using namespace gpipe;
using namespace gpipe::train;
using Catch::Contains;
using gpipe::testing::child_check;
using gpipe::testing::drop_root_in_child;
using gpipe::testing::run_in_child;
using train::testing::tiny_transformer;
using train::testing::with;

namespace {

// The message train() throws for `args`, and how long it took (seconds).
std::pair<std::string, double> refusal(const std::vector<std::string>& args) {
  std::ostringstream log;
  const auto t0 = std::chrono::steady_clock::now();
  std::string what = "(trained: no refusal)";
  try {
    train::train(parse_train_flags(args), log);
  } catch (const Error& e) {
    what = e.what();
  }
  return {what, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

}  // namespace

TEST_CASE("preflight: the paper's largest Transformer is refused at once, with the figure") {
  const auto [what, secs] =
      refusal({"--model=transformer", "--preset=T(64,16384,32)", "--steps=1"});
  CHECK(secs < 2);
  if (usable_memory().value < 80e9) {
    CHECK_THAT(what, Contains("out of memory on cpu") && Contains("81.68 GB") &&
                         Contains("5,104,224,256 parameters x 16 bytes") && Contains("--K") &&
                         Contains("--precision") && Contains("gpipe_plan --memory="));
  }
}

TEST_CASE("preflight: absurd sizes are refused without wrapping or building") {
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"--model=transformer", "--layers=100000000"},
                                             {"--model=transformer", "--dim=1000000000"},
                                             {"--model=transformer", "--batch=100000000"},
                                             {"--model=amoebanet", "--filters=100000"},
                                             {"--model=amoebanet", "--normal-cells=100000"}}) {
    const auto [what, secs] = refusal(with(args, {"--steps=1"}));
    INFO(args[1] << ": " << what);
    CHECK(secs < 2);
    CHECK_THAT(what, Contains("out of memory on cpu") && Contains("more than the"));
  }
  const MemoryEstimate wide =
      estimate_memory(parse_train_flags({"--model=transformer", "--dim=1000000000", "--steps=1"}));
  CHECK(wide.parameters == INT64_MAX);  // saturated, not wrapped to a negative count
  CHECK(wide.parameter_bytes > 1e20);
}

TEST_CASE("preflight: bytes per parameter follow the optimizer and the precision") {
  auto per = [](std::initializer_list<std::string> more) {
    return estimate_memory(parse_train_flags(with(tiny_transformer(0), more))).bytes_per_parameter;
  };
  CHECK(per({"--optimizer=adam"}) == 16);  // weights, gradients, two moments
  CHECK(per({"--optimizer=sgd", "--momentum=0"}) == 8);
  CHECK(per({"--optimizer=sgd", "--momentum=0.9"}) == 12);
  CHECK(per({"--optimizer=adam", "--precision=bf16"}) == 18);  // + 16-bit weight copies
}

TEST_CASE("preflight: far more threads than cores is refused by name") {
  const uint64_t cores = usable_cores().value;
  std::vector<std::string> args = with(tiny_transformer(0), {"--steps=1"});
  std::replace(args.begin(), args.end(), std::string("--threads=1"),
               std::string("--threads=100000"));
  const auto [what, secs] = refusal(args);
  CHECK(secs < 2);
  CHECK_THAT(what, Contains("--threads=100000: far more threads than the " + std::to_string(cores) +
                            " core(s)"));
  const auto [k8, secs8] =
      refusal({"--model=transformer", "--K=8", "--M=32", "--threads=5000", "--steps=1"});
  CHECK_THAT(k8, Contains("--threads=5000"));
  CHECK(planned_threads(8, 2) == 34);
}

TEST_CASE(
    "preflight: under a lowered RLIMIT_AS a big run is refused naming it, a small one trains") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  WARN("built with a sanitizer (terabytes of address space reserved): skipped");
  return;
#endif
  CHECK(run_in_child([] {
          const rlim_t limit = 3ull << 30;
          const rlimit as{limit, limit};
          if (setrlimit(RLIMIT_AS, &as) != 0) return 2;
          const auto [what, secs] =
              refusal({"--model=transformer", "--preset=T(6,8192,16)", "--steps=1"});
          int failures = child_check(what.find("RLIMIT_AS") != std::string::npos &&
                                         what.find("4.44 GB") != std::string::npos,
                                     "T(6,8192,16) under 3 GiB: " + what);
          std::ostringstream log;
          const TrainSummary s = train::train(
              parse_train_flags(with(tiny_transformer(0), {"--steps=1", "--no-final-eval"})), log);
          failures += child_check(s.losses.size() == 1, "the tiny transformer did not train");
          return failures;
        }) == 0);
}

TEST_CASE("preflight: under a lowered RLIMIT_NPROC the threads are refused naming it") {
  const int rc = run_in_child([] {
    if (!drop_root_in_child()) return 3;
    const rlim_t room = static_cast<rlim_t>(user_threads_now() + 10);
    const rlimit few{room, room};
    if (setrlimit(RLIMIT_NPROC, &few) != 0) return 2;
    std::vector<std::string> args = with(tiny_transformer(0), {"--steps=1"});
    std::replace(args.begin(), args.end(), std::string("--K=2"), std::string("--K=8"));
    const auto [what, secs] = refusal(args);
    return child_check(what.find("RLIMIT_NPROC") != std::string::npos &&
                           what.find("need 18 threads") != std::string::npos,
                       "8 cells under a low RLIMIT_NPROC: " + what);
  });
  if (rc == 3) {
    WARN("no unprivileged user to run as: skipped");
    return;
  }
  CHECK(rc == 0);
}

TEST_CASE("preflight: on GPUs each device's cells are held against its free memory") {
  // A stand-in for the CUDA runtime's query (runtime/cuda installs the real
  // one): cuda:0 has 1 GB free, cuda:1 has 100 GB.
  register_free_memory_query(static_cast<int>(DeviceType::kCUDA), [](int index) -> uint64_t {
    return index == 0 ? uint64_t{1} << 30 : uint64_t{100} << 30;
  });
  TrainConfig c = parse_train_flags({"--model=gpt2", "--preset=gpt2-medium", "--steps=1"});
  c.K = 2;
  c.devices = "cuda:0,cuda:1";
  // 354M parameters x 16 bytes over 2 cells: about 2.8 GB each.
  CHECK_THROWS_WITH(check_memory(c, 2, 2, 1), Contains("out of memory on cuda:0") &&
                                                  Contains("cuda:0's free memory") &&
                                                  Contains("--precision=bf16"));
  c.devices = "cuda:1,cuda:1";
  CHECK_NOTHROW(check_memory(c, 2, 2, 1));
  register_free_memory_query(static_cast<int>(DeviceType::kCUDA), nullptr);
  c.devices = "cuda:0,cuda:1";
  CHECK_NOTHROW(check_memory(c, 2, 2, 1));  // no runtime to ask: not checked
}
