#include "data/text_source.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/lm_rows.h"
#include "data/token_shard.h"
#include "tests/test_util.h"

using namespace gpipe;
using Catch::Matchers::Contains;

TEST_CASE("--data expands files, folders in name order and globs", "[text_source]") {
  const std::string d = testing::scratch_dir("text_source_expand");
  std::filesystem::create_directories(d + "/f/sub");
  std::filesystem::create_directories(d + "/f/.hidden");
  testing::write_file(d + "/f/b.txt", "b");
  testing::write_file(d + "/f/a.jsonl", "{}");
  testing::write_file(d + "/f/sub/c.bin", "");
  testing::write_file(d + "/f/.hidden/x.doc", "ignored");
  testing::write_file(d + "/f/.notes", "ignored");
  testing::write_file(d + "/one.txt", "1");
  testing::write_file(d + "/two.txt", "2");
  const std::vector<std::string> got =
      expand_data_paths({d + "/t*.txt", d + "/f", d + "/one.txt"}, "--data");
  CHECK(got == std::vector<std::string>{d + "/two.txt", d + "/f/a.jsonl", d + "/f/b.txt",
                                        d + "/f/sub/c.bin", d + "/one.txt"});
  CHECK_THROWS_WITH(expand_data_paths({d + "/nope.txt"}, "--data"),
                    Contains("--data=") && Contains("nope.txt' does not exist"));
  CHECK_THROWS_WITH(expand_data_paths({d + "/z*.txt"}, "--val-data"),
                    Contains("--val-data=") && Contains("matches no file"));
  std::filesystem::create_directories(d + "/empty");
  CHECK_THROWS_WITH(expand_data_paths({d + "/empty"}, "--data"), Contains("holds no file"));
  testing::write_file(d + "/f/notes.md", "x");
  CHECK_THROWS_WITH(expand_data_paths({d + "/f"}, "--data"),
                    Contains("notes.md") && Contains("unknown data format '.md'") &&
                        Contains(".txt") && Contains(".jsonl") && Contains(".bin"));
}

TEST_CASE(".txt: one document per file, or split at blank lines", "[text_source]") {
  const std::string d = testing::scratch_dir("text_source_txt");
  testing::write_file(d + "/a.txt", "first para\nline two\n\n  \nsecond\n\n\nthird");
  const auto whole = read_documents(d + "/a.txt", {});
  REQUIRE(whole.size() == 1);
  CHECK(whole[0].text == "first para\nline two\n\n  \nsecond\n\n\nthird");
  const auto paras = read_documents(d + "/a.txt", {.doc_split = "blank"});
  REQUIRE(paras.size() == 3);
  CHECK(paras[0].text == "first para\nline two\n");
  CHECK(paras[1].text == "second\n");
  CHECK(paras[1].source == d + "/a.txt:5");
  CHECK(paras[2].text == "third\n");
  testing::write_file(d + "/blank.txt", " \n\n");
  CHECK(read_documents(d + "/blank.txt", {}).empty());
}

TEST_CASE(".jsonl: the text field of each record; bad lines name file:line", "[text_source]") {
  const std::string d = testing::scratch_dir("text_source_jsonl");
  const std::string p = d + "/r.jsonl";
  testing::write_file(
      p, "{\"text\": \"hello\\nworld\", \"id\": 1}\n\n{\"body\": \"b\", \"text\": \"x\"}\n");
  const auto docs = read_documents(p, {});
  REQUIRE(docs.size() == 2);
  CHECK(docs[0].text == "hello\nworld");
  CHECK(docs[1].source == p + ":3");
  CHECK_THROWS_WITH(read_documents(p, {.text_field = "body"}),
                    Contains("r.jsonl:1: no \"body\" key") && Contains("--text-field"));
  testing::write_file(p, "{\"text\": \"ok\"}\n{\"text\": \"broken\n");
  CHECK_THROWS_WITH(read_documents(p, {}), Contains("r.jsonl:2") && Contains("malformed JSON"));
  testing::write_file(p, "[1, 2]\n");
  CHECK_THROWS_WITH(read_documents(p, {}), Contains("r.jsonl:1: a JSON array, expected an object"));
  testing::write_file(p, "{\"content\": \"x\"}\n");
  CHECK_THROWS_WITH(read_documents(p, {}), Contains("r.jsonl:1: no \"text\" key"));
  testing::write_file(p, "{\"text\": 3}\n");
  CHECK_THROWS_WITH(read_documents(p, {}),
                    Contains("\"text\" is a JSON number, expected a string"));
}

TEST_CASE("rows are windows over packed text and mapped shards", "[lm_rows]") {
  const std::string d = testing::scratch_dir("lm_rows_windows");
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 11; ++i) ids.push_back(100 + i);
  write_token_shard(d + "/s.bin", ids, 1);
  auto shard = std::make_shared<const TokenShard>(d + "/s.bin");
  BytesTokenizer tok;
  LmRows rows(4);
  rows.add_packed(pack({{"x:1", "abcdefgh"}}, tok, 4));  // 9 tokens: 2 rows
  rows.add_shard(shard, 1, 11);                          // 10 tokens: 2 rows
  CHECK(rows.rows() == 4);
  CHECK(rows.stream_tokens() == 19);
  CHECK(rows.inputs({2}).to_vector<int64_t>() == std::vector<int64_t>{101, 102, 103, 104});
  CHECK(rows.targets({3}).to_vector<int64_t>() == std::vector<int64_t>{106, 107, 108, 109});
  CHECK(rows.inputs({1}).to_vector<int64_t>() == std::vector<int64_t>{'e', 'f', 'g', 'h'});
  CHECK(rows.targets({1}).to_vector<int64_t>() == std::vector<int64_t>{'f', 'g', 'h', 256});
  CHECK_THROWS_WITH(rows.inputs({4}), Contains("row 4 of 4"));
  // The held-out cut falls on an end-of-text token when one is near.
  write_token_shard(d + "/e.bin", {5, 5, 9, 5, 5, 5, 9, 5, 5, 5}, 1);
  CHECK(shard_split_point(TokenShard(d + "/e.bin"), 0.2, 9) == 6);
  CHECK(shard_split_point(TokenShard(d + "/e.bin"), 0.2, 7) == 8);
}
