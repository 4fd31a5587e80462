// Fuzz harness: a safetensors file (header length, JSON header, data) read
// by optim::load_safetensors.
#include "optim/safetensors.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      gpipe::fuzz::write_file("in.safetensors", gpipe::fuzz::bytes(data, size));
  gpipe::fuzz::refusing_bad_input([&] {
    const gpipe::optim::SafetensorsFile f = gpipe::optim::load_safetensors(path);
    for (const auto& [name, t] : f.tensors)
      if (t.numel() > 0 && t.raw_data() == nullptr) std::abort();  // a tensor without storage
  });
  return 0;
}
