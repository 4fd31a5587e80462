// safetensors: round trips, the exact bytes of a small file, corrupt files,
// atomic saves; and the JSON reader underneath.
#include "optim/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/tensor.h"
#include "optim/json.h"
#include "tests/test_util.h"

namespace gpipe::optim {
namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string le64(uint64_t n) {
  std::string out(8, '\0');
  for (int b = 0; b < 8; ++b) out[b] = static_cast<char>(n >> (8 * b));
  return out;
}

// A file with `header` as its JSON header and `data` after it.
std::string make_file(const std::string& dir, const std::string& header, const std::string& data) {
  const std::string path = dir + "/f.safetensors";
  write_bytes(path, le64(header.size()) + header + data);
  return path;
}

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST_CASE("safetensors round trip: every dtype, scalars, empty and strided tensors") {
  const std::string dir = testing::scratch_dir("safetensors_roundtrip");
  const std::string path = dir + "/t.safetensors";
  Tensor f32 = Tensor::from_vector<float>({1.5f, -2.0f, 3.25f, 1e-30f, 7, 8}, Shape{2, 3});
  Tensor f64 = Tensor::from_vector<double>({0.1, -1e300}, Shape{2});
  Tensor i32 = Tensor::from_vector<int32_t>({-7, 2147483647}, Shape{1, 2});
  Tensor i64 = Tensor::from_vector<int64_t>({int64_t{1} << 62}, Shape{1});
  Tensor scalar = Tensor::scalar(42.5, DType::kFloat64);
  Tensor empty = Tensor::zeros(Shape{0}, DType::kFloat32);
  Tensor empty2 = Tensor::zeros(Shape{2, 0, 3}, DType::kInt64);
  Tensor transposed = Tensor::make_view(f32, Shape{3, 2}, {1, 3}, 0);
  Tensor on_cpu1 = f64.to(Device{DeviceType::kCPU, 1});
  const std::map<std::string, std::string> meta{
      {"note", "quotes \" backslash \\ newline \n tab \t é"}, {"empty", ""}};
  save_safetensors(path,
                   {{"f32", f32},
                    {"f64", f64},
                    {"i32", i32},
                    {"i64", i64},
                    {"scalar", scalar},
                    {"empty", empty},
                    {"empty2", empty2},
                    {"w.T", transposed},
                    {"cpu1", on_cpu1}},
                   meta);
  CHECK(listing(dir) == std::vector<std::string>{"t.safetensors"});

  const SafetensorsFile f = load_safetensors(path);
  CHECK(f.metadata == meta);
  REQUIRE(f.tensors.size() == 9);
  CHECK(f.tensors.at("f32").to_vector<float>() == f32.to_vector<float>());
  CHECK(f.tensors.at("f64").to_vector<double>() == f64.to_vector<double>());
  CHECK(f.tensors.at("i32").to_vector<int32_t>() == i32.to_vector<int32_t>());
  CHECK(f.tensors.at("i64").to_vector<int64_t>() == i64.to_vector<int64_t>());
  CHECK(f.tensors.at("i64").dtype() == DType::kInt64);
  CHECK(f.tensors.at("scalar").shape() == Shape{});
  CHECK(f.tensors.at("scalar").item() == 42.5);
  CHECK(f.tensors.at("empty").shape() == Shape{0});
  CHECK(f.tensors.at("empty2").shape() == Shape{2, 0, 3});
  CHECK(f.tensors.at("empty2").dtype() == DType::kInt64);
  CHECK(f.tensors.at("w.T").shape() == Shape{3, 2});
  CHECK(f.tensors.at("w.T").to_vector<float>() == transposed.to_vector<float>());
  CHECK(f.tensors.at("cpu1").device() == kCpu);
  CHECK(f.tensors.at("cpu1").to_vector<double>() == f64.to_vector<double>());
}

TEST_CASE("safetensors bytes: length, padded JSON header, raw little-endian data") {
  const std::string dir = testing::scratch_dir("safetensors_bytes");
  const std::string path = dir + "/t.safetensors";
  save_safetensors(path, {{"a", Tensor::from_vector<float>({1.0f, 2.0f}, Shape{2})}}, {{"k", "v"}});
  const std::string header =
      R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"
      " ";  // 79 bytes of JSON + 1 space: the data starts at byte 88, a multiple of 8
  const std::string data("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);  // 1.0f, 2.0f
  CHECK(read_bytes(path) == std::string("\x50\0\0\0\0\0\0\0", 8) + header + data);

  // Wider dtypes go first so every tensor is aligned to its element size.
  save_safetensors(path, {{"s", Tensor::from_vector<int32_t>({5}, Shape{1})},
                          {"d", Tensor::from_vector<double>({1.0}, Shape{1})}});
  const std::string bytes = read_bytes(path);
  CHECK_THAT(bytes, Contains(R"({"d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},)"
                             R"("s":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}})"));
  CHECK(bytes.find("__metadata__") == std::string::npos);
}

TEST_CASE("Corrupt safetensors files give one error naming the file and the problem") {
  const std::string dir = testing::scratch_dir("safetensors_corrupt");
  const std::string f32x4 = std::string(16, '\0');
  auto load_error = [&](const std::string& path) {
    try {
      load_safetensors(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string prefix = "safetensors file '" + dir + "/f.safetensors': ";
  auto file_error = [&](const std::string& header, const std::string& data) {
    const std::string msg = load_error(make_file(dir, header, data));
    CHECK_THAT(msg, Catch::Matchers::StartsWith(prefix));
    return msg;
  };

  CHECK(load_error(dir + "/missing.safetensors") ==
        "safetensors file '" + dir + "/missing.safetensors': no such file");
  write_bytes(dir + "/short", "abcd");
  CHECK_THAT(load_error(dir + "/short"), Contains("truncated: the file has 4 bytes"));
  write_bytes(dir + "/f.safetensors", le64(1000) + "{}");
  CHECK_THAT(load_error(dir + "/f.safetensors"),
             Contains("truncated: header length 1000 exceeds the 2 bytes after the length field"));

  CHECK_THAT(file_error(R"({"a": {"dtype": "F32",)", ""),
             Contains("header is not valid JSON: malformed JSON at byte 22"));
  CHECK_THAT(file_error(R"({"a": 1, "a": 2})", ""), Contains("duplicate key \"a\""));
  CHECK_THAT(file_error(R"([1, 2])", ""), Contains("header is a JSON array, expected an object"));
  CHECK_THAT(file_error(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x"),
             Contains("tensor 'a': unknown or unsupported dtype 'U8'"));
  CHECK_THAT(file_error(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", f32x4),
             Contains("tensor 'a': data_offsets [0, 12] hold 12 bytes, but shape [2, 2] of dtype "
                      "F32 needs 16"));
  CHECK_THAT(
      file_error(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", f32x4.substr(8)),
      Contains(
          "truncated: tensor 'a' has data_offsets [0, 16] but the data section has only 8 bytes"));
  CHECK_THAT(file_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                        f32x4.substr(4)),
             Contains("tensors 'a' and 'b' overlap (data_offsets [0, 8] and [4, 12])"));
  CHECK_THAT(
      file_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f32x4.substr(8)),
      Contains("data bytes [0, 4) belong to no tensor"));
  CHECK_THAT(
      file_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32x4.substr(8)),
      Contains("the data section has 8 bytes but the tensors cover only 4"));
  CHECK_THAT(file_error(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", f32x4),
             Contains("shape entries must be non-negative integers"));
  CHECK_THAT(file_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", f32x4),
             Contains("data_offsets [8, 4] end before they begin"));
  CHECK_THAT(file_error(R"({"a":{"dtype":"F32","shape":[1]}})", ""),
             Contains("\"data_offsets\" must be an array [begin, end]"));
  CHECK_THAT(file_error(R"({"__metadata__":{"step":3}})", ""),
             Contains("__metadata__ value of 'step' is a JSON number, expected a string"));

  // A real file cut short.
  const std::string good = dir + "/good.safetensors";
  save_safetensors(good, {{"w", Tensor::zeros(Shape{4, 4})}});
  const std::string bytes = read_bytes(good);
  write_bytes(good, bytes.substr(0, bytes.size() - 4));
  CHECK_THAT(load_error(good),
             Contains("truncated: tensor 'w' has data_offsets [0, 64] but the data "
                      "section has only 60 bytes"));
}

TEST_CASE("save_safetensors is atomic: failures leave no partial file") {
  const std::string dir = testing::scratch_dir("safetensors_atomic");
  const Tensor t = Tensor::from_vector<float>({1, 2, 3}, Shape{3});

  // The directory does not exist.
  CHECK_THROWS_WITH(save_safetensors(dir + "/no/such/dir/x.safetensors", {{"t", t}}),
                    Contains("cannot create '" + dir + "/no/such/dir/x.safetensors.tmp."));
  // A directory nobody may write to (/proc refuses even root).
  CHECK_THROWS_WITH(save_safetensors("/proc/gpipe_test.safetensors", {{"t", t}}),
                    Contains("save_safetensors: cannot create '/proc/gpipe_test.safetensors.tmp."));
  CHECK_FALSE(fs::exists("/proc/gpipe_test.safetensors"));
  if (::geteuid() != 0) {  // permission bits do not stop root
    const std::string ro = dir + "/readonly";
    fs::create_directory(ro);
    ::chmod(ro.c_str(), 0555);
    CHECK_THROWS_AS(save_safetensors(ro + "/x.safetensors", {{"t", t}}), Error);
    CHECK(listing(ro).empty());
    ::chmod(ro.c_str(), 0755);
  }
  // Everything is written, then the rename fails (the target is a directory):
  // the temporary file is removed and the target untouched.
  const std::string target = dir + "/target";
  fs::create_directory(target);
  CHECK_THROWS_WITH(save_safetensors(target, {{"t", t}}), Contains("cannot rename"));
  CHECK(listing(dir) == std::vector<std::string>{"target"});
  CHECK(fs::is_directory(target));

  // An invalid tensor list fails before any file is created.
  CHECK_THROWS_WITH(save_safetensors(dir + "/x", {{"t", t}, {"t", t}}),
                    Contains("two tensors are named 't'"));
  CHECK_THROWS_WITH(save_safetensors(dir + "/x", {{"__metadata__", t}}), Contains("is reserved"));
  CHECK_THROWS_WITH(save_safetensors(dir + "/x", {{"", t}}), Contains("empty name"));
  CHECK(listing(dir) == std::vector<std::string>{"target"});

  // Overwriting replaces the old file whole.
  const std::string path = dir + "/x.safetensors";
  save_safetensors(path, {{"t", t}});
  save_safetensors(path, {{"u", Tensor::scalar(1.0)}});
  const SafetensorsFile f = load_safetensors(path);
  CHECK(f.tensors.size() == 1);
  CHECK(f.tensors.count("u") == 1);
  CHECK(listing(dir) == std::vector<std::string>{"target", "x.safetensors"});
}

TEST_CASE("JSON reader: escapes, unicode, numbers, limits") {
  const json::Value v =
      json::parse(R"( {"s": "a\"b\\c\/\n\u00e9\ud83d\ude00", "n": [0, -1.5e3, 18446744073709551615],
                                        "t": true, "f": false, "z": null, "o": {}} )");
  REQUIRE(v.kind == json::Value::Kind::kObject);
  CHECK(v.find("s")->text == "a\"b\\c/\n\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(v.find("n")->items[0].as_uint() == uint64_t{0});
  CHECK_FALSE(v.find("n")->items[1].as_uint().has_value());
  CHECK(v.find("n")->items[2].as_uint() == UINT64_MAX);
  CHECK(v.find("t")->boolean);
  CHECK(v.find("z")->kind == json::Value::Kind::kNull);
  CHECK(v.find("o")->members.empty());
  CHECK(v.find("missing") == nullptr);
  CHECK_FALSE(json::parse("18446744073709551616").as_uint().has_value());  // overflows

  const std::string tricky = std::string("q\"\\\x01\n\x1f end", 10);
  CHECK(json::parse(json::quote(tricky)).text == tricky);
  CHECK(json::quote("a\"\n") == R"("a\"\u000a")");

  CHECK_THROWS_WITH(json::parse("{} x"), Contains("malformed JSON at byte 3: unexpected 'x'"));
  CHECK_THROWS_WITH(json::parse("\"abc"), Contains("unterminated string"));
  CHECK_THROWS_WITH(json::parse("01"), Contains("unexpected '1'"));
  CHECK_THROWS_WITH(json::parse("[1,]"), Contains("malformed JSON at byte 3: unexpected ']'"));
  CHECK_THROWS_WITH(json::parse("\"\\ud800\""), Contains("unpaired surrogate"));
  CHECK_THROWS_WITH(json::parse("\"a\tb\""), Contains("control character"));
  CHECK_THROWS_WITH(json::parse(std::string(100, '[') + std::string(100, ']')),
                    Contains("nesting deeper than 64"));
  CHECK_THROWS_WITH(json::parse(""), Contains("expected a value, got end of input"));
}

}  // namespace
}  // namespace gpipe::optim
