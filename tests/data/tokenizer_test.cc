#include "data/tokenizer.h"

#include <catch2/catch.hpp>

using namespace gpipe;
using Catch::Matchers::Contains;

TEST_CASE("ByteTokenizer: vocabulary layout", "[data][tokenizer]") {
  ByteTokenizer tok({"fr", "de"});
  CHECK(tok.vocab_size() == 4 + 2 + 256);
  CHECK(tok.language_id("fr") == 4);
  CHECK(tok.language_id("de") == 5);
  CHECK(tok.byte_id(0) == 6);
  CHECK(tok.byte_id('A') == 6 + 65);
  CHECK(tok.token_name(0) == "<pad>");
  CHECK(tok.token_name(2) == "<eos>");
  CHECK(tok.token_name(5) == "<de>");
  CHECK(tok.token_name(tok.byte_id('a')) == "a");
  CHECK(tok.token_name(tok.byte_id(0xc3)) == "\\xc3");
  CHECK_THROWS_WITH(tok.language_id("xx"), Contains("unknown language \"xx\""));
  CHECK_THROWS_WITH(ByteTokenizer({"fr", "fr"}), Contains("listed twice"));
}

TEST_CASE("ByteTokenizer: encode/decode round-trips any UTF-8 and raw bytes", "[data][tokenizer]") {
  ByteTokenizer tok({"fr"});
  const std::string texts[] = {
      "",
      "German",
      "français",                      // 2-byte sequence
      "日本語",                        // 3-byte sequences
      "emoji \xF0\x9F\x98\x80 ok",     // 4-byte sequence
      std::string("nul\0inside", 10),  // embedded NUL
      "\xff\xfe invalid \xc3",         // not UTF-8 at all
  };
  for (const std::string& s : texts) {
    std::vector<int64_t> ids = tok.encode(s);
    CHECK(ids.size() == s.size());
    for (int64_t id : ids) CHECK(tok.is_byte(id));
    CHECK(tok.decode(ids) == s);
  }
  std::vector<int64_t> tagged = tok.encode_with_tag("fr", "é");
  CHECK(tagged == std::vector<int64_t>{4, tok.byte_id(0xc3), tok.byte_id(0xa9)});
  CHECK(tok.decode(tagged) == "<fr>é");
}

TEST_CASE("ByteTokenizer: decode skips PAD/BOS and stops at EOS", "[data][tokenizer]") {
  ByteTokenizer tok;
  std::vector<int64_t> ids = {ByteTokenizer::kBos, tok.byte_id('h'), tok.byte_id('i'),
                              ByteTokenizer::kEos, tok.byte_id('x'), ByteTokenizer::kPad};
  CHECK(tok.decode(ids) == "hi");
  CHECK(tok.decode({ByteTokenizer::kUnk}) == "\xEF\xBF\xBD");
  CHECK_THROWS_WITH(tok.decode({tok.vocab_size()}), Contains("outside the vocabulary"));
}
