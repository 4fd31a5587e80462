// What the fuzz harnesses found, as ordinary tests of the messages a
// user gets: each input below once crashed or misbehaved; the replay tests
// (tests/fuzz/corpus) run the same files through the harnesses.
//  - IDX: a header whose dimensions multiply past 64 bits overflowed the item
//    size, and one promising more data than the file holds allocated all of
//    it first (std::length_error instead of a gpipe::Error).
//  - Messages between ranks: sizes from the header were not checked (a
//    negative or huge dimension, a product past 64 bits), and the payload was
//    allocated before its length was compared with the bytes received.
//  - A zero-sized axis hid the other sizes from the checks of messages,
//    safetensors headers and IDX headers (they bounded numel, which is 0):
//    [0, 5e18, 39] passed, and the strides of the tensor built from it
//    overflowed (UBSan, found by the message harness in CI).
//  - gpipe_plan --memory=1e300TB and --link=1e300TB passed the size check
//    (the number was finite before its unit multiplied it) and became an
//    infinite memory limit or bandwidth.
//  - A sharded checkpoint's manifest could name shards outside its folder
//    ("../x", "/x"): read_checkpoint followed the path.
//  - A schedule header's K past int (sscanf overflowed it) with devices=D
//    sized the device map before K was checked against the text (OOM).
//  - A schedule program's header sized the parser's stage list (K) and the
//    dry run's per-micro-batch tables (M) before anything was checked: two
//    lines asking for K = 2e9 or M = 1e9 ran out of memory.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "data/fashion_mnist.h"
#include "optim/checkpoint.h"
#include "optim/safetensors.h"
#include "pipeline/plan.h"
#include "pipeline/schedule.h"
#include "runtime/communicator.h"

using Catch::Matchers::Contains;

namespace gpipe {
namespace {

std::string corpus(const std::string& harness, const std::string& file) {
  return "tests/fuzz/corpus/" + harness + "/" + file;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST_CASE("fuzz regressions: IDX headers with impossible sizes are refused before allocating") {
  REQUIRE_THROWS_WITH(read_idx_gz(corpus("idx", "huge_dims.idx"), 2051),
                      Contains("implausible IDX dimensions"));
  // A header that promises more items than the file holds: truncation.
  REQUIRE_THROWS_WITH(read_idx_gz(corpus("idx", "truncated.idx"), 2051), Contains("truncated"));
  const IdxArray ok = read_idx_gz(corpus("idx", "images.idx.gz"), 2051);
  CHECK(ok.dims == std::vector<int64_t>{2, 2, 2});
  CHECK(ok.data.size() == 8);
}

TEST_CASE("fuzz regressions: message headers with impossible shapes are refused") {
  REQUIRE_THROWS_WITH(deserialize_message(read_all(corpus("message", "huge_dims.msg")), kCpu),
                      Contains("implausible shape"));
  REQUIRE_THROWS_WITH(deserialize_message(read_all(corpus("message", "negative_dim.msg")), kCpu),
                      Contains("implausible shape"));
  REQUIRE_THROWS_WITH(
      deserialize_message(read_all(corpus("message", "truncated_payload.msg")), kCpu),
      Contains("payload truncated"));
  const Message m = deserialize_message(read_all(corpus("message", "valid_two.msg")), kCpu);
  REQUIRE(m.tensors.size() == 3);
  CHECK(m.tensors[0].to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  CHECK_FALSE(m.tensors[1].defined());
  CHECK(m.tensors[2].to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});
}

TEST_CASE("fuzz regressions: a zero-sized axis does not hide sizes whose strides overflow") {
  REQUIRE_THROWS_WITH(deserialize_message(read_all(corpus("message", "zero_hides_huge.msg")), kCpu),
                      Contains("implausible shape"));

  const auto dir = std::filesystem::temp_directory_path() / "gpipe_fuzz_zero_axis";
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream((dir / name).string(), std::ios::binary) << bytes;
    return (dir / name).string();
  };
  // safetensors: an 8-byte little-endian header length, then the JSON header.
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[0,4611686018427387904,39],"data_offsets":[0,0]}})";
  std::string st(8, '\0');
  for (int i = 0; i < 8; ++i) st[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  REQUIRE_THROWS_WITH(optim::load_safetensors(write("zero.safetensors", st + header)),
                      Contains("shape is too large"));
  // An empty tensor with sane sizes still loads.
  optim::save_safetensors((dir / "empty.safetensors").string(),
                          {{"w", Tensor::empty(Shape{0, 3}, DType::kFloat32, kCpu)}}, {});
  CHECK(optim::load_safetensors((dir / "empty.safetensors").string()).tensors.at("w").shape() ==
        Shape{0, 3});

  // IDX (gzopen reads a plain file too): magic 0x803, sizes [4e9, 0, 4e9].
  std::string idx = {0, 0, 8, 3};
  for (uint32_t d : {4000000000u, 0u, 4000000000u})
    for (int shift : {24, 16, 8, 0}) idx.push_back(static_cast<char>((d >> shift) & 0xff));
  REQUIRE_THROWS_WITH(read_idx_gz(write("zero.idx", idx), 2051),
                      Contains("implausible IDX dimensions"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("fuzz regressions: gpipe_plan's sizes and links stay finite") {
  CHECK(parse_bytes("16GB") == 16e9);
  CHECK_THROWS_WITH(parse_bytes("1e300TB"), Contains("not a plausible size"));
  ModelCosts costs;
  apply_link("10GB,5e-6", costs);
  CHECK(costs.link_bytes_per_second == 10e9);
  CHECK(costs.link_latency_seconds == 5e-6);
  CHECK_THROWS_WITH(apply_link("1e300TB,1", costs), Contains("--link: '1e300TB,1'"));
  CHECK_THROWS_WITH(apply_link("1GB,1e400", costs), Contains("not a latency in seconds"));
  CHECK_THROWS_WITH(apply_link("1GB,nan", costs), Contains("not a latency in seconds"));
  CHECK_THROWS_WITH(apply_link("fast", costs), Contains("pcie, nvlink, infiniband"));
}

TEST_CASE("fuzz regressions: a manifest naming a shard outside its folder is refused") {
  const auto dir = std::filesystem::temp_directory_path() / "gpipe_fuzz_regression";
  std::filesystem::create_directories(dir / "inner");
  optim::save_safetensors((dir / "secret").string(),
                          {{"w", Tensor::from_vector<float>({1}, Shape{1})}},
                          {{"gpipe.step", "1"}});
  const std::string manifest = (dir / "inner" / "ckpt").string();
  optim::save_safetensors(manifest, {},
                          {{"gpipe.format", "checkpoint-manifest/1"},
                           {"gpipe.step", "1"},
                           {"gpipe.shards", "../secret"}});
  REQUIRE_THROWS_WITH(optim::read_checkpoint(manifest), Contains("is not a plain file name"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("fuzz regressions: a schedule header asking for more than its text lists is refused") {
  // K past int (sscanf's %d overflowed into a large K) with devices=2: the
  // device map was sized by K before K was checked against the text.
  REQUIRE_THROWS_WITH(parse_schedule_text(read_all(corpus("schedule", "huge_k_with_devices"))),
                      Contains("expected the header"));
  REQUIRE_THROWS_WITH(parse_schedule_text("schedule K=99999 M=1 train devices=2\n0: F0\n"),
                      Contains("cannot be listed"));
  REQUIRE_THROWS_WITH(parse_schedule_text(read_all(corpus("schedule", "huge_k.txt"))),
                      Contains("cannot be listed"));
  REQUIRE_THROWS_WITH(parse_schedule_text(read_all(corpus("schedule", "huge_m.txt"))),
                      Contains("cannot be listed"));
  // Built in code rather than parsed: the dry run refuses it before sizing its tables.
  Schedule s;
  s.M = 1000000000;
  s.stages = {{Action{ActionKind::kForward, 0}}};
  REQUIRE_THROWS_WITH(validate(s, 1, s.M), Contains("fewer than the M = 1000000000"));
}

}  // namespace
}  // namespace gpipe
