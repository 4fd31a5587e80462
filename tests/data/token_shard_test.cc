#include "data/token_shard.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/test_util.h"

using namespace gpipe;
using Catch::Matchers::Contains;

namespace {

// A shard's bytes: a header of the given words (the rest zero), then `body`.
std::string shard_bytes(int32_t magic, int32_t version, int32_t count, const std::string& body) {
  std::string out(kShardHeaderBytes, '\0');
  const int32_t words[3] = {magic, version, count};
  std::memcpy(out.data(), words, sizeof words);
  return out + body;
}

}  // namespace

TEST_CASE("token shards round-trip both versions", "[token_shard]") {
  const std::string dir = testing::scratch_dir("token_shard_round_trip");
  const std::vector<int64_t> small = {0, 1, 50256, 65535, 7};
  write_token_shard(dir + "/v1.bin", small, 1);
  TokenShard v1(dir + "/v1.bin");
  CHECK(v1.size() == 5);
  CHECK(v1.token_bytes() == 2);
  CHECK(v1.version() == 1);
  CHECK(v1.path() == dir + "/v1.bin");
  for (int64_t i = 0; i < v1.size(); ++i) CHECK(v1[i] == small[static_cast<size_t>(i)]);
  CHECK(v1.max_id() == 65535);
  CHECK(testing::read_file(dir + "/v1.bin").size() == 1024 + 5 * 2);

  const std::vector<int64_t> big = {128255, 0, 4294967295LL};
  write_token_shard(dir + "/v7.bin", big, 7);
  TokenShard v7(dir + "/v7.bin");
  CHECK(v7.token_bytes() == 4);
  std::vector<int64_t> back;
  v7.read(0, 3, back);
  CHECK(back == big);
  CHECK_THROWS_WITH(v7.read(2, 2, back), Contains("v7.bin") && Contains("outside its 3"));

  TokenShard moved = std::move(v7);
  CHECK(moved[0] == 128255);

  write_token_shard(dir + "/empty.bin", {}, 1);
  CHECK(TokenShard(dir + "/empty.bin").size() == 0);
}

TEST_CASE("the header agrees with llm.c's layout", "[token_shard]") {
  const std::string dir = testing::scratch_dir("token_shard_layout");
  write_token_shard(dir + "/a.bin", {3, 258}, 1);
  const std::string bytes = testing::read_file(dir + "/a.bin");
  int32_t words[4];
  std::memcpy(words, bytes.data(), sizeof words);
  CHECK(words[0] == 20240520);
  CHECK(words[1] == 1);
  CHECK(words[2] == 2);
  CHECK(words[3] == 0);
  uint16_t t[2];
  std::memcpy(t, bytes.data() + 1024, sizeof t);
  CHECK(t[0] == 3);
  CHECK(t[1] == 258);
}

TEST_CASE("writing refuses ids that do not fit and bad versions", "[token_shard]") {
  const std::string dir = testing::scratch_dir("token_shard_write_refusals");
  CHECK_THROWS_WITH(write_token_shard(dir + "/a.bin", {1, 65536}, 1),
                    Contains("token id 65536 at position 1") && Contains("version 7"));
  CHECK_THROWS_WITH(write_token_shard(dir + "/a.bin", {-1}, 7), Contains("token id -1"));
  CHECK_THROWS_WITH(write_token_shard(dir + "/a.bin", {1}, 2), Contains("version 2"));
  CHECK_THROWS_WITH(write_token_shard(dir + "/no/such/dir/a.bin", {1}, 1),
                    Contains("cannot write"));
}

TEST_CASE("reading refuses broken shards by name", "[token_shard]") {
  const std::string dir = testing::scratch_dir("token_shard_refusals");
  const std::string p = dir + "/bad.bin";
  CHECK_THROWS_WITH(TokenShard(dir + "/missing.bin"),
                    Contains("missing.bin") && Contains("cannot open"));
  testing::write_file(p, std::string(100, '\0'));
  CHECK_THROWS_WITH(TokenShard(p), Contains("bad.bin") && Contains("100 bytes, shorter"));
  testing::write_file(p, shard_bytes(12345, 1, 0, ""));
  CHECK_THROWS_WITH(TokenShard(p), Contains("bad magic 12345"));
  testing::write_file(p, shard_bytes(kShardMagicV1, 7, 0, ""));
  CHECK_THROWS_WITH(TokenShard(p), Contains("version 7") && Contains("expected version 1"));
  testing::write_file(p, shard_bytes(kShardMagicV7, 1, 0, ""));
  CHECK_THROWS_WITH(TokenShard(p), Contains("expected version 7"));
  testing::write_file(p, shard_bytes(kShardMagicV1, 1, 10, std::string(8, '\0')));
  CHECK_THROWS_WITH(TokenShard(p), Contains("declares 10 tokens") && Contains("room for 4"));
  testing::write_file(p, shard_bytes(kShardMagicV7, 7, -3, ""));
  CHECK_THROWS_WITH(TokenShard(p), Contains("declares -3 tokens"));
  // Bytes past the declared count are ignored (llm.c writes none).
  testing::write_file(p, shard_bytes(kShardMagicV1, 1, 1, std::string(6, '\1')));
  TokenShard ok(p);
  CHECK(ok.size() == 1);
  CHECK(ok[0] == 257);
  CHECK_THROWS_WITH(TokenShard(dir), Contains("not a regular file"));
}
