// Ranks: where each process (or, in one process, each stage's thread) sits
// in a job of K stages x R replicas (Note [Processes]).
//  - Pipeline-major: ranks [rK, rK + K) are replica r's stages 0..K-1
//    (neighbouring stages on neighbouring ranks, so on one host with
//    mpirun's by-slot mapping).
//  - Stage-major: ranks [sR, sR + R) are stage s's replicas (the gradient
//    all-reduce stays on a host).
#pragma once

#include <string>

namespace gpipe {

enum class RankLayout { kPipelineMajor, kStageMajor };
RankLayout parse_rank_layout(const std::string& name);  // "pipeline" | "stage"
const char* rank_layout_name(RankLayout l);

struct RankInfo {
  int world_rank = 0, world_size = 1;
  int stage = 0, replica = 0;   // this rank's stage (the index of its cell) and replica
  int cells = 1, replicas = 1;  // K and R
};
// Where world rank `rank` of a K x R job sits under `layout`.
RankInfo rank_info_for(int rank, int cells, int replicas, RankLayout layout);
// The world rank of (stage, replica).
int world_rank_of(int stage, int replica, int cells, int replicas, RankLayout layout);

}  // namespace gpipe
