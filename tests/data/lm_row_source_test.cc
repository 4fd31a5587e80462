// Where a language-model row starts (row_source, LmRows::source): the file
// and line of packed text, advanced past the newlines before the row's first
// token; a shard's token offset; a source without a line number.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "data/lm_corpus.h"
#include "data/lm_rows.h"
#include "data/token_shard.h"
#include "tests/test_util.h"

using namespace gpipe;
using Catch::Matchers::Contains;

TEST_CASE("a packed row's source is its document's file and the line of its first token") {
  BytesTokenizer tok;
  // Stream: "ab\ncd\n" <eot> "e\nfgh\n" <eot>: 14 tokens, rows of 4 at stride 3.
  const PackedRows p = pack({{"f.txt:10", "ab\ncd\n"}, {"g.txt:4", "e\nfgh\n"}}, tok, 3);
  REQUIRE(p.rows == 4);
  CHECK(row_source(p, tok, 0) == "f.txt:10");  // 'a'
  CHECK(row_source(p, tok, 1) == "f.txt:11");  // 'c', after one newline
  CHECK(row_source(p, tok, 2) == "f.txt:12");  // the end-of-text token after "cd\n"
  CHECK(row_source(p, tok, 3) == "g.txt:5");   // 'f' ("e\n" before it)
  CHECK_THROWS_WITH(row_source(p, tok, 4), Contains("row 4 of 4"));
  // A source without a line number counts tokens instead.
  const PackedRows q = pack({{"record 7", "abcdef"}}, tok, 2);
  CHECK(row_source(q, tok, 0) == "record 7");
  CHECK(row_source(q, tok, 2) == "record 7 +4 tokens");
}

TEST_CASE("LmRows names packed text by line and a shard by token offset") {
  const std::string d = testing::scratch_dir("lm_row_source");
  std::vector<int64_t> ids(11, 7);
  write_token_shard(d + "/s.bin", ids, 1);
  BytesTokenizer tok;
  LmRows rows(4);
  rows.add_packed(pack({{"x.txt:1", "abc\nefgh"}}, tok, 4));  // 9 tokens: 2 rows
  rows.add_shard(std::make_shared<const TokenShard>(d + "/s.bin"), 1, 11);
  CHECK(rows.source(1, tok) == "x.txt:2");
  CHECK(rows.source(3, tok) == d + "/s.bin token 5");
  CHECK_THROWS_WITH(rows.source(4, tok), Contains("row 4 of 4"));
}
