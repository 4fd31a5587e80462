// TokenShard: a read-only view of one llm.c token shard (Note [Token shard
// format] in data/token_shard.cc): a 1024-byte header of 256 little-endian
// int32 (magic, version, token count, zeros) followed by the tokens, uint16
// for version 1 (magic 20240520, GPT-2's vocabulary fits) and uint32 for
// version 7 (magic 20240801, Llama 3's does not).
//
//   TokenShard s("train_000.bin");       // mapped, not read
//   for (int64_t i = 0; i < s.size(); ++i) use(s[i]);
//   write_token_shard("out.bin", ids, 1);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {

inline constexpr int32_t kShardMagicV1 = 20240520;  // uint16 tokens
inline constexpr int32_t kShardMagicV7 = 20240801;  // uint32 tokens
inline constexpr int64_t kShardHeaderInts = 256;
inline constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;

class TokenShard {
 public:
  // Maps `path` read-only and checks its header. Throws gpipe::Error naming
  // the file and what is wrong: missing or unreadable, a header shorter than
  // 1024 bytes, an unknown magic, a version that disagrees with the magic, a
  // token count beyond the file's size (or negative).
  explicit TokenShard(const std::string& path);
  ~TokenShard();
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  // Tokens the header declares (bytes past them are ignored).
  int64_t size() const { return size_; }
  // Token i, 0 <= i < size() (unchecked: the caller's loop bounds it).
  int64_t operator[](int64_t i) const {
    return token_bytes_ == 2 ? static_cast<int64_t>(reinterpret_cast<const uint16_t*>(data_)[i])
                             : static_cast<int64_t>(reinterpret_cast<const uint32_t*>(data_)[i]);
  }
  // Tokens [first, first + n) into `out` (resized); throws gpipe::Error
  // naming the file if the range is outside [0, size()).
  void read(int64_t first, int64_t n, std::vector<int64_t>& out) const;
  int token_bytes() const { return token_bytes_; }  // 2 (version 1) or 4 (version 7)
  int version() const { return token_bytes_ == 2 ? 1 : 7; }
  const std::string& path() const { return path_; }
  // The largest token id (one pass over the map; the answer is kept).
  int64_t max_id() const;

 private:
  void unmap();
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* data_ = nullptr;  // the first token
  int64_t size_ = 0;
  int token_bytes_ = 2;
  mutable int64_t max_id_ = -1;
};

// Writes `tokens` as an llm.c shard of `version` 1 (uint16; an id above
// 65535 is refused naming it and its position) or 7 (uint32; ids must fit
// in 32 bits): to `path`.tmp, then renamed over `path`, so a reader never
// sees half a file. Throws gpipe::Error naming the path when it cannot write.
void write_token_shard(const std::string& path, const std::vector<int64_t>& tokens, int version);

}  // namespace gpipe
