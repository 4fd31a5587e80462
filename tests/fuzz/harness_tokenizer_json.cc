// Fuzz harness: a Hugging Face tokenizer.json read by BpeTokenizer; a file
// that loads then encodes the input's own bytes and a mixed-script line
// (invalid UTF-8 included) and decodes the ids.
#include "data/bpe_tokenizer.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpipe::fuzz::refusing_bad_input([&] {
    const std::string_view text = gpipe::fuzz::bytes(data, size);
    const auto tok = gpipe::BpeTokenizer::from_json(text, "fuzz.json");
    for (const std::string_view s :
         {text.substr(0, 512), std::string_view("It's 2024: \xd0\x9f\xd1\x80\xd0\xb8 \xe4\xbd\xa0"
                                                "\xe5\xa5\xbd \xf0\x9f\x98\x80\xff\n\n  x")})
      (void)tok->decode(tok->encode(s));
  });
  return 0;
}
