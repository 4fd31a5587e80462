// Fuzz harness: an IDX file (Fashion-MNIST's format, gzip-compressed or
// plain) read by read_idx_gz as images (magic 2051) and as labels (2049),
// all items and the first three.
#include "data/fashion_mnist.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = gpipe::fuzz::write_file("in.idx.gz", gpipe::fuzz::bytes(data, size));
  for (uint32_t magic : {2051u, 2049u})
    for (int64_t limit : {int64_t{-1}, int64_t{3}})
      gpipe::fuzz::refusing_bad_input([&] { (void)gpipe::read_idx_gz(path, magic, limit); });
  return 0;
}
