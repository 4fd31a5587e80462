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

#include "layers/layer.h"
#include "optim/optimizer.h"

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
void save_checkpoint(const std::string& path, const std::vector<NamedTensor>& tensors,
                     int64_t step, const std::map<std::string, std::string>& metadata = {});

struct LoadCheckpointOptions {
  // Ignore file tensors nobody asked for instead of failing. ("optim/..."
  // tensors are never unexpected when no optimizer is passed.)
  bool allow_unexpected = false;
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

}  // namespace gpipe::optim
