// .mo parser. Every offset is checked against the file size in 64-bit
// arithmetic before it is used, so a corrupt or truncated catalog is a
// gpipe::Error naming the file, never an out-of-bounds read.
#include "data/mo_file.h"

#include <fstream>
#include <iterator>

#include "core/error.h"

namespace gpipe {
namespace {

constexpr uint32_t kMoMagic = 0x950412de;
constexpr uint32_t kMoMagicSwapped = 0xde120495;

std::string hex32(uint32_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  for (int shift = 28; shift >= 0; shift -= 4) s += digits[(v >> shift) & 0xf];
  return s;
}

class MoReader {
 public:
  MoReader(std::string_view bytes, const std::string& name, bool big_endian)
      : bytes_(bytes), name_(name), big_endian_(big_endian) {}

  uint32_t word(uint64_t at, const char* what) const {
    GPIPE_CHECK(at + 4 <= bytes_.size(), name_, ": truncated .mo file: ", what, " at byte ", at,
                " lies past the end of the file (", bytes_.size(), " bytes)");
    const auto* p = reinterpret_cast<const unsigned char*>(bytes_.data() + at);
    if (big_endian_)
      return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) |
             uint32_t{p[3]};
    return (uint32_t{p[3]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[1]} << 8) | uint32_t{p[0]};
  }

  // String `i` of the table at `table` (8-byte (length, offset) entries).
  std::string_view string(uint64_t table, uint32_t i, const char* which) const {
    const uint64_t entry = table + 8ull * i;
    const uint64_t length = word(entry, which);
    const uint64_t offset = word(entry + 4, which);
    GPIPE_CHECK(offset + length <= bytes_.size(), name_, ": corrupt or truncated .mo file: ", which,
                " string ", i, " spans bytes [", offset, ", ", offset + length,
                ") but the file has ", bytes_.size(), " bytes");
    return bytes_.substr(offset, length);
  }

 private:
  std::string_view bytes_;
  const std::string& name_;
  bool big_endian_;
};

}  // namespace

MoCatalog parse_mo(std::string_view bytes, const std::string& name) {
  GPIPE_CHECK(bytes.size() >= 20, name, ": truncated .mo file: expected a 20-byte header, got ",
              bytes.size(), " bytes");
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const uint32_t le_magic =
      (uint32_t{p[3]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[1]} << 8) | uint32_t{p[0]};
  GPIPE_CHECK(le_magic == kMoMagic || le_magic == kMoMagicSwapped, name,
              ": not a GNU .mo file: expected magic 0x950412de (either byte order), got ",
              hex32(le_magic));

  MoCatalog cat;
  cat.big_endian = le_magic == kMoMagicSwapped;
  MoReader r(bytes, name, cat.big_endian);
  cat.revision = r.word(4, "revision");
  GPIPE_CHECK((cat.revision >> 16) <= 1, name, ": unsupported .mo major revision ",
              cat.revision >> 16, " (expected 0 or 1)");
  const uint32_t n = r.word(8, "string count");
  const uint64_t originals = r.word(12, "originals table offset");
  const uint64_t translations = r.word(16, "translations table offset");
  for (uint64_t table : {originals, translations})
    GPIPE_CHECK(table + 8ull * n <= bytes.size(), name,
                ": corrupt or truncated .mo file: a table of ", n, " entries at byte ", table,
                " runs past the end of the file (", bytes.size(), " bytes)");

  cat.entries.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    std::string_view id = r.string(originals, i, "original");
    std::string_view str = r.string(translations, i, "translation");
    MoEntry e;
    if (const size_t eot = id.find('\x04'); eot != std::string_view::npos) {
      e.context = std::string(id.substr(0, eot));
      id.remove_prefix(eot + 1);
    }
    // Plural entries hold "singular\0plural" and "form0\0form1\0...".
    id = id.substr(0, id.find('\0'));
    str = str.substr(0, str.find('\0'));
    if (id.empty() && e.context.empty()) {
      cat.header = std::string(str);
      continue;
    }
    e.original = std::string(id);
    e.translation = std::string(str);
    cat.entries.push_back(std::move(e));
  }
  return cat;
}

MoCatalog read_mo_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  GPIPE_CHECK(in.good(), path,
              ": cannot open .mo file (missing? the iso-codes package installs them)");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  GPIPE_CHECK(!in.bad(), path, ": read error");
  return parse_mo(bytes, path);
}

}  // namespace gpipe
