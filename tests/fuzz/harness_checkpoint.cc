// Fuzz harness: a sharded checkpoint's manifest (a safetensors file whose
// metadata lists the shards, optim/checkpoint.h) read by
// optim::read_checkpoint, next to one valid shard of step 1 named
// "ckpt.step1-a.shard0of1" in the same folder.
#include <map>
#include <vector>

#include "optim/checkpoint.h"
#include "optim/safetensors.h"
#include "tests/fuzz/fuzz.h"

namespace {
void make_shard_once() {
  static const bool made = [] {
    const std::string path = gpipe::fuzz::scratch_dir() + "/ckpt.step1-a.shard0of1";
    gpipe::optim::save_safetensors(
        path, {{"w", gpipe::Tensor::from_vector<float>({1, 2, 3, 4}, gpipe::Shape{2, 2})}},
        {{"gpipe.step", "1"}});
    return true;
  }();
  (void)made;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  make_shard_once();
  const std::string path = gpipe::fuzz::write_file("ckpt", gpipe::fuzz::bytes(data, size));
  gpipe::fuzz::refusing_bad_input([&] { (void)gpipe::optim::read_checkpoint(path); });
  return 0;
}
