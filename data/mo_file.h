// GNU gettext .mo catalogs, parsed directly (no msgunfmt).
//
// Layout (all words uint32 in the file's byte order, told by the magic
// 0x950412de read either way round):
//   0: magic   4: revision   8: N strings   12: offset O of the originals
//   table   16: offset T of the translations table   (20: hash table, unused)
// Each table holds N (length, offset) pairs; string i of the originals is
// bytes [offset, offset + length) followed by a NUL. Entry 0 is usually the
// empty msgid, whose translation is the catalog header.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gpipe {

struct MoEntry {
  std::string context;      // msgctxt ("" when none), split off the msgid at '\x04'
  std::string original;     // msgid without its context; singular form for plurals
  std::string translation;  // msgstr; the first form for plural entries
};

struct MoCatalog {
  uint32_t revision = 0;
  bool big_endian = false;
  std::string header;            // translation of the empty msgid ("" if absent)
  std::vector<MoEntry> entries;  // in file order (sorted by msgid), header excluded
};

// Reads and parses `path`. Throws gpipe::Error naming the file when it is
// missing, not a .mo file (bad magic), of an unknown major revision, or
// truncated / corrupt (a table or string lies outside the file).
MoCatalog read_mo_file(const std::string& path);

// Parses .mo bytes already in memory; `name` appears in error messages.
MoCatalog parse_mo(std::string_view bytes, const std::string& name);

}  // namespace gpipe
