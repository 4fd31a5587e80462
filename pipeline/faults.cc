#include "pipeline/faults.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace gpipe {

FaultHook fault_hook_from_spec(const std::string& spec) {
  int want_rank = -1, want_micro = 0;
  long want_step = -1;
  std::string kind = "throw", at = "forward";
  std::stringstream items(spec);
  std::string item;
  while (std::getline(items, item, ',')) {
    char word[16] = "";
    if (std::sscanf(item.c_str(), "rank=%d", &want_rank) == 1 ||
        std::sscanf(item.c_str(), "step=%ld", &want_step) == 1 ||
        std::sscanf(item.c_str(), "micro=%d", &want_micro) == 1)
      continue;
    if (std::sscanf(item.c_str(), "kind=%15[a-z]", word) == 1) {
      kind = word;
    } else if (std::sscanf(item.c_str(), "at=%15[a-z]", word) == 1) {
      at = word;
    } else {
      throw Error(detail::concat(
          "fault spec '", spec, "': cannot read '", item,
          "' (expected "
          "rank=R,step=S,micro=M,kind=throw|exit|kill|hang[,at=forward|sync|tied|connect])"));
    }
  }
  GPIPE_CHECK(kind == "throw" || kind == "exit" || kind == "kill" || kind == "hang", "fault spec '",
              spec, "': unknown kind '", kind, "' (expected throw, exit, kill or hang)");
  GPIPE_CHECK(at == "forward" || at == "sync" || at == "tied" || at == "connect", "fault spec '",
              spec, "': unknown at '", at, "' (expected forward, sync, tied or connect)");
  const bool setup = at == "connect";
  return [=](const FaultPoint& p) {
    if (p.world_rank != want_rank || at != p.where) return;
    if (!setup && (p.step + 1 != want_step || p.micro_batch != want_micro)) return;
    if (kind == "kill") std::raise(SIGKILL);
    if (kind == "exit") std::_Exit(3);
    if (kind == "hang")
      while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
    throw Error(detail::concat("injected fault (GPIPE_FAULT=", spec, ")"));
  };
}

}  // namespace gpipe
