#include "data/mo_file.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tests/test_util.h"

using namespace gpipe;
using Catch::Matchers::Contains;

namespace {

// Writes a .mo image: header words, the two (length, offset) tables, then
// the NUL-terminated strings, all words in the chosen byte order.
std::string build_mo(const std::vector<std::pair<std::string, std::string>>& entries,
                     bool big_endian) {
  std::string out;
  auto word = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) {
      const int shift = big_endian ? 24 - 8 * i : 8 * i;
      out.push_back(static_cast<char>((v >> shift) & 0xff));
    }
  };
  const auto n = static_cast<uint32_t>(entries.size());
  const uint32_t originals = 28, translations = originals + 8 * n;
  uint32_t cursor = translations + 8 * n;
  std::string strings;
  std::vector<uint32_t> table;
  for (int side = 0; side < 2; ++side)
    for (const auto& e : entries) {
      const std::string& s = side == 0 ? e.first : e.second;
      table.push_back(static_cast<uint32_t>(s.size()));
      table.push_back(cursor);
      strings += s;
      strings.push_back('\0');
      cursor += static_cast<uint32_t>(s.size()) + 1;
    }
  word(0x950412de);
  word(0);  // revision
  word(n);
  word(originals);
  word(translations);
  word(0);  // hash table size
  word(0);  // hash table offset
  for (uint32_t v : table) word(v);
  return out + strings;
}

const std::vector<std::pair<std::string, std::string>> kEntries = {
    {"", "Content-Type: text/plain; charset=UTF-8\n"},
    {"French", "français"},
    {"German", "allemand"},
    {std::string("file\0files", 10), std::string("fichier\0fichiers", 16)},
    {"menu\x04Open", "Ouvrir"},
};

void check_hand_built(const MoCatalog& cat) {
  CHECK(cat.header == "Content-Type: text/plain; charset=UTF-8\n");
  REQUIRE(cat.entries.size() == 4);
  CHECK(cat.entries[0].original == "French");
  CHECK(cat.entries[0].translation == "français");
  CHECK(cat.entries[0].context.empty());
  CHECK(cat.entries[2].original == "file");
  CHECK(cat.entries[2].translation == "fichier");
  CHECK(cat.entries[3].context == "menu");
  CHECK(cat.entries[3].original == "Open");
  CHECK(cat.entries[3].translation == "Ouvrir");
}

}  // namespace

TEST_CASE(".mo: the real French iso_639-3 catalog", "[data][mo]") {
  MoCatalog cat = read_mo_file("/usr/share/locale/fr/LC_MESSAGES/iso_639-3.mo");
  CHECK(cat.entries.size() > 5000);
  CHECK_THAT(cat.header, Contains("charset=UTF-8"));
  auto find = [&](const std::string& english) {
    auto it = std::find_if(cat.entries.begin(), cat.entries.end(),
                           [&](const MoEntry& e) { return e.original == english; });
    return it == cat.entries.end() ? std::string("<missing>") : it->translation;
  };
  CHECK(find("French") == "français");
  CHECK(find("German") == "allemand");
  CHECK(find("English") == "anglais");
  for (const MoEntry& e : cat.entries) REQUIRE(!e.original.empty());
}

TEST_CASE(".mo: hand-built little- and big-endian catalogs", "[data][mo]") {
  const std::string dir = testing::scratch_dir("mo_hand");
  for (bool big_endian : {false, true}) {
    const std::string path = dir + (big_endian ? "/be.mo" : "/le.mo");
    testing::write_file(path, build_mo(kEntries, big_endian));
    MoCatalog cat = read_mo_file(path);
    CHECK(cat.big_endian == big_endian);
    CHECK(cat.revision == 0);
    check_hand_built(cat);
  }
}

TEST_CASE(".mo: corrupt and missing files name the file", "[data][mo]") {
  const std::string dir = testing::scratch_dir("mo_bad");
  const std::string path = dir + "/bad.mo";
  const std::string good = build_mo(kEntries, false);

  SECTION("missing") {
    CHECK_THROWS_WITH(read_mo_file(dir + "/nope.mo"),
                      Contains(dir + "/nope.mo") && Contains("cannot open"));
  }
  SECTION("bad magic") {
    std::string bytes = good;
    bytes[0] = 'X';
    testing::write_file(path, bytes);
    CHECK_THROWS_WITH(read_mo_file(path),
                      Contains(path + ": not a GNU .mo file") && Contains("0x950412de"));
  }
  SECTION("shorter than the header") {
    testing::write_file(path, good.substr(0, 12));
    CHECK_THROWS_WITH(read_mo_file(path), Contains(path + ": truncated"));
  }
  SECTION("tables cut off") {
    testing::write_file(path, good.substr(0, 40));
    CHECK_THROWS_WITH(read_mo_file(path), Contains(path) && Contains("runs past the end"));
  }
  SECTION("strings cut off") {
    testing::write_file(path, good.substr(0, good.size() - 4));
    CHECK_THROWS_WITH(read_mo_file(path), Contains(path) && Contains("translation string 4"));
  }
  SECTION("unknown major revision") {
    std::string bytes = good;
    bytes[6] = 2;  // revision 0x00020000
    testing::write_file(path, bytes);
    CHECK_THROWS_WITH(read_mo_file(path), Contains(path) && Contains("major revision 2"));
  }
}

TEST_CASE(".mo: every truncation and header corruption is an Error, never a crash", "[data][mo]") {
  const std::string good = build_mo(kEntries, true);
  for (size_t len = 0; len < good.size(); ++len) {
    try {
      parse_mo(std::string_view(good).substr(0, len), "cut.mo");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Contains("cut.mo"));
    }
  }
  for (size_t at = 8; at < 28 + 16 * kEntries.size(); ++at) {
    std::string bytes = good;
    bytes[at] = static_cast<char>(0xff);
    try {
      parse_mo(bytes, "flipped.mo");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Contains("flipped.mo"));
    }
  }
}
