#include "pipeline/ranks.h"

#include "core/error.h"

namespace gpipe {

RankLayout parse_rank_layout(const std::string& name) {
  if (name == "pipeline") return RankLayout::kPipelineMajor;
  if (name == "stage") return RankLayout::kStageMajor;
  throw Error(detail::concat("unknown rank layout '", name, "' (expected pipeline or stage)"));
}

const char* rank_layout_name(RankLayout l) {
  return l == RankLayout::kPipelineMajor ? "pipeline" : "stage";
}

RankInfo rank_info_for(int rank, int cells, int replicas, RankLayout layout) {
  RankInfo r;
  r.world_rank = rank;
  r.world_size = cells * replicas;
  r.cells = cells;
  r.replicas = replicas;
  r.stage = layout == RankLayout::kPipelineMajor ? rank % cells : rank / replicas;
  r.replica = layout == RankLayout::kPipelineMajor ? rank / cells : rank % replicas;
  return r;
}

int world_rank_of(int stage, int replica, int cells, int replicas, RankLayout layout) {
  return layout == RankLayout::kPipelineMajor ? replica * cells + stage
                                              : stage * replicas + replica;
}

}  // namespace gpipe
