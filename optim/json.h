// A small JSON reader and writer for safetensors headers (internal to optim).
//
// Reads full JSON (RFC 8259) into a Value tree, keeping object members in
// file order and numbers as their literal text, so integers of any size can
// be checked exactly. Writes only what the headers need: quoted strings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpipe::optim::json {

struct Member;  // an object's key and value (below: Value is incomplete here)

struct Value {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;             // a string's decoded value, or a number's literal
  std::vector<Value> items;     // array
  std::vector<Member> members;  // object, in file order

  const Value* find(std::string_view key) const;  // object member or nullptr
  // The number as a non-negative integer, if it is written as one and fits.
  std::optional<uint64_t> as_uint() const;
};

struct Member {
  std::string key;
  Value value;
};

const char* kind_name(Value::Kind k);  // "object", "string", ...

// Parses `text` (one value, surrounded only by whitespace). Throws
// gpipe::Error "malformed JSON at byte <offset>: <what>" on bad syntax,
// duplicate object keys, or nesting deeper than 64.
Value parse(std::string_view text);

// `s` as a JSON string literal (quotes, escapes for '"', '\\' and control
// characters; other bytes, UTF-8 included, pass through).
std::string quote(std::string_view s);

}  // namespace gpipe::optim::json
