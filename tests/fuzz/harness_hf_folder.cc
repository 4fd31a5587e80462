// Fuzz harness: a Hugging Face model folder read by gpipe_train --init-from
// (tools/train/hf_io.h). The input is cut at the first two "\n@@\n" markers
// into config.json, model.safetensors.index.json (absent when empty) and one
// shard, model-00001-of-00001.safetensors. The config is read; when it
// describes a small model, that model's weights are loaded from the shard
// through the index.
#include <filesystem>

#include "models/lm.h"
#include "tests/fuzz/fuzz.h"
#include "tools/train/hf_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in = gpipe::fuzz::bytes(data, size);
  const size_t a = in.find("\n@@\n");
  const size_t b = a == std::string_view::npos ? a : in.find("\n@@\n", a + 4);
  const std::string_view config = in.substr(0, a);
  const std::string_view index =
      a == std::string_view::npos ? ""
                                  : in.substr(a + 4, b == std::string_view::npos ? b : b - a - 4);
  const std::string_view shard = b == std::string_view::npos ? "" : in.substr(b + 4);
  const std::string dir = gpipe::fuzz::scratch_dir() + "/hf";
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir + "/model.safetensors.index.json");
  gpipe::fuzz::write_file("hf/config.json", config);
  if (!index.empty()) gpipe::fuzz::write_file("hf/model.safetensors.index.json", index);
  gpipe::fuzz::write_file("hf/model-00001-of-00001.safetensors", shard);
  gpipe::fuzz::refusing_bad_input([&] {
    const gpipe::models::LmConfig c = gpipe::train::read_hf_config(dir);
    if (gpipe::models::lm_parameter_count(c) > 200000 || c.context > 4096) return;
    gpipe::Model m = gpipe::models::language_model(c);
    gpipe::train::load_hf_weights(dir, c, gpipe::named_state(m.layers));
  });
  return 0;
}
