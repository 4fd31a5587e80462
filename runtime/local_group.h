// LocalGroup: the ranks of a multi-process job played by threads of one
// process. Each thread takes its own Communicator (`rank(r)`) and builds its
// own Pipeline with it, exactly as a process would with mpi::world().
// Collectives reduce in rank order (deterministic); transports are mailboxes
// with a copy to the receiving device. Used by tests (the distributed
// pipeline under ThreadSanitizer, without mpirun) and usable wherever
// several pipelines should run one job inside one process.
#pragma once

#include <memory>

#include "runtime/communicator.h"

namespace gpipe {

class LocalGroup {
 public:
  explicit LocalGroup(int size);
  ~LocalGroup();
  int size() const;
  // Rank r's communicator (the whole group); each rank's thread uses its own.
  std::shared_ptr<Communicator> rank(int r);

  struct Shared;

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace gpipe
