// Training checkpoints: model tensors, optimizer state and the step number
// in one safetensors file (see optim/safetensors.h), written atomically.
//
// File layout:
//   "<name>"              each unique model tensor (parameters and buffers);
//                         a tensor listed under several names (tied weights)
//                         is stored once, under its first name
//   "optim/<state>"       each Optimizer::state() tensor, e.g.
//                         "optim/encoder_0.ffn.in.weight.exp_avg"
//   __metadata__          "gpipe.format" = "checkpoint/1", "gpipe.step",
//                         "optim.name", "optim.step_count", "optim.<hyper>"
//                         (Optimizer::hyper_params(), e.g. "optim.lr"), and
//                         the caller's own keys
//
// Loading copies values into the existing tensors in place (on whatever
// device they live), so a resumed run continues the saved trajectory bit for
// bit. The optimizer's lr and step count are restored from the file; its
// other hyper-parameters are the ones it was constructed with.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/bundle.h"
#include "optim/optimizer.h"
#include "optim/safetensors.h"

namespace gpipe {
class Communicator;  // runtime/communicator.h
}

namespace gpipe::optim {

// Saves `tensors` (e.g. model.parameters() then model.buffers()), the
// optimizer's state and `step`. `metadata` keys must not start with "gpipe."
// or "optim." (reserved). Throws gpipe::Error naming the file for an
// undefined tensor, two different tensors under one name, a reserved key or
// an I/O failure; nothing is written then.
void save_checkpoint(const std::string& path, const std::vector<NamedTensor>& tensors,
                     const Optimizer& opt, int64_t step,
                     const std::map<std::string, std::string>& metadata = {});
// The same without optimizer state (e.g. for export or evaluation).
void save_checkpoint(const std::string& path, const std::vector<NamedTensor>& tensors, int64_t step,
                     const std::map<std::string, std::string>& metadata = {});

struct LoadCheckpointOptions {
  // Ignore file tensors nobody asked for instead of failing. ("optim/..."
  // tensors are never unexpected when no optimizer is passed.)
  bool allow_unexpected = false;
  // Groups of names for one tied tensor (Pipeline::tied_names()): a tensor
  // asked for under one name may come from the file under another, and so
  // may its optimizer state ("optim/<name>.<state>"). That lets a file saved
  // with one cut of the model (K cells, one process per stage, or one
  // process) load into another.
  std::vector<std::vector<std::string>> aliases;
};

// Loads `path` into `tensors` and, if non-null, `opt` (its state, lr and step
// count) and `*step`. Everything is checked before anything is written: on
// error the model and optimizer are unchanged. Throws one gpipe::Error
// "checkpoint <path>: <problems>" listing e.g.
//   tensor 'encoder_0.ffn.in.weight' has shape [512, 256], the model expects [1024, 256]
//   tensor 'x' has dtype float64, the model expects float32
//   missing tensor 'x'
//   unexpected tensor 'x'
// and for a file without optimizer state (or of another optimizer kind) when
// `opt` is given, or without a step when `step` is given; file-level problems
// come from load_safetensors.
void load_checkpoint(const std::string& path, const std::vector<NamedTensor>& tensors,
                     Optimizer* opt, int64_t* step, const LoadCheckpointOptions& options = {});

// ---- Sharded checkpoints (one process per stage) ----
//
// A sharded checkpoint is a manifest at `path` (a safetensors file with no
// tensors; metadata "gpipe.format" = "checkpoint-manifest/1", "gpipe.step",
// "gpipe.shards" = the shard file names, comma-separated, relative to the
// manifest's folder, and the caller's metadata) plus one ordinary
// checkpoint file per shard: "<path>.step<S>-<save id>.shard<i>of<n>". Tensors are
// named by layer as in a single file, so any layout can load it, and
// load_checkpoint / read_checkpoint accept either kind.

// The file at `path` as one SafetensorsFile: itself, or for a manifest the
// union of its shards (a name found in several shards, such as a tied
// tensor's copy in each cell, is taken from the first shard listing it;
// training keeps those copies identical) with the manifest's
// metadata over the first shard's. Throws gpipe::Error naming a missing or
// mismatched shard (another step, another shard count).
SafetensorsFile read_checkpoint(const std::string& path);

// Called by every rank of `world`: ranks with `writer` set save `tensors`
// and `opt` as shard `shard` of `shards`; when every writer has succeeded,
// rank 0 writes the manifest (atomically, so the path always names a whole
// checkpoint: the previous one until this one is complete), then removes the
// shards of the checkpoint it replaced. If any writer fails, no manifest is
// written and every rank throws gpipe::Error naming the ranks that failed.
struct ShardedSave {
  bool writer = true;
  int shard = 0, shards = 1;
};
}  // namespace gpipe::optim
namespace gpipe {
class Communicator;
}
namespace gpipe::optim {
void save_sharded_checkpoint(Communicator& world, const ShardedSave& who, const std::string& path,
                             const std::vector<NamedTensor>& tensors, const Optimizer& opt,
                             int64_t step, const std::map<std::string, std::string>& metadata = {});

}  // namespace gpipe::optim
