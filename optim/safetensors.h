// Reading and writing the safetensors format (huggingface/safetensors):
//
//   [8 bytes]  N, the header length, unsigned little-endian
//   [N bytes]  JSON header: {"<name>": {"dtype": "F32", "shape": [2, 3],
//              "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}}
//              padded with spaces so the data starts 8-byte aligned
//   [rest]     the tensors' raw little-endian bytes, row-major; offsets are
//              relative to the end of the header
//
// dtypes: F32, F64, I32, I64 (and BF16, F16 as raw bytes). Files are written
// atomically: to "<path>.tmp.<pid>", fsync'd, then renamed over `path`, so a
// crash or error leaves either the old file or the new one, never a partial.
// A writer killed before the rename leaves its "<path>.tmp.<pid>"; the next
// save of `path` removes those whose process is gone (optim/stale_temp.h).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace gpipe::optim {

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;        // contiguous CPU (cpu:0) tensors
  std::map<std::string, std::string> metadata;  // "__metadata__", empty if absent
};

// Writes `tensors` (in the given order; any CPU device, any strides) and
// `metadata` to `path`. Throws gpipe::Error naming the file for an empty,
// repeated or reserved ("__metadata__") name, an unsupported dtype, or an
// I/O failure (e.g. the directory is not writable); on error no file is left
// behind and an existing file at `path` is untouched.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads a whole file. New tensors are charged to the calling thread's
// MemoryCategory. Throws one gpipe::Error "safetensors file '<path>': <problem>"
// for a missing/unreadable file, a truncated file (header length or data
// offsets beyond the end), malformed JSON, an unknown dtype, data_offsets
// that do not match shape * dtype size, overlapping or non-contiguous data
// regions, or metadata that is not a string-to-string object.
SafetensorsFile load_safetensors(const std::string& path);

// "F32" etc. for a dtype; throws gpipe::Error for one safetensors cannot hold.
std::string safetensors_dtype_name(DType dtype);

}  // namespace gpipe::optim
