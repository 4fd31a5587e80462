// Fault injection for tests of failure handling (Note [Fault injection]).
// The executor calls PipelineOptions::fault_hook, when set, at named points
// of a step; the hook may throw, end the process, or stall. Normal runs
// leave it unset, so the executor never reads the environment.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace gpipe {

struct FaultPoint {
  int world_rank = 0;
  int64_t step = 0;  // 0-based, as Pipeline counts
  int micro_batch = 0;
  // "forward" (before micro_batch's forward), "sync" (before the replica
  // sum), "tied" (before the tied gradients' sum, after the loss's), or
  // "connect" (while the ranks connect their links, before any step: step
  // and micro_batch are 0).
  const char* where = "";
};
using FaultHook = std::function<void(const FaultPoint&)>;

// Note [Fault injection]: a hook from a spec "rank=R,step=S,micro=M,kind=K[,at=A]"
// (the GPIPE_FAULT variable gpipe_train reads): world rank R fails in step S
// (1-based, as the trainer counts) at the forward of micro-batch M (at=forward,
// the default), before summing its gradients with its replicas (at=sync) or
// before the sum of the tied gradients (at=tied); or while connecting its
// links at start-up (at=connect: step and micro are ignored).
// Kind "throw" raises gpipe::Error, "exit" ends the process with code 3,
// "kill" sends itself SIGKILL, "hang" stops making progress. Throws
// gpipe::Error for a malformed spec.
FaultHook fault_hook_from_spec(const std::string& spec);

}  // namespace gpipe
