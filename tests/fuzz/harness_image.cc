// Fuzz harness: PNG and JPEG bytes through decode_image (a small pixel limit
// keeps each input fast), read_mask, and on success the resizer and the
// channel conversion.
#include "data/image_decode.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in = gpipe::fuzz::bytes(data, size);
  gpipe::fuzz::refusing_bad_input([&] {
    const gpipe::Image img = gpipe::decode_image(std::string(in), "in", int64_t{1} << 20);
    (void)gpipe::resize_shorter_side(gpipe::to_channels(img, 3), 7);
    (void)gpipe::resize(img, 3, 40, /*nearest=*/true);
  });
  const std::string path = gpipe::fuzz::write_file("in.png", in);
  gpipe::fuzz::refusing_bad_input([&] { (void)gpipe::read_mask(path, int64_t{1} << 20); });
  return 0;
}
