// Note [Token shard format]. llm.c's dev/data scripts write each shard as a
// header of 256 int32 (little-endian; x86 and ARM hosts alike): [0] the
// magic, [1] the version, [2] the number of tokens, the rest zero. Version 1
// (magic 20240520) stores uint16 tokens, enough for GPT-2's 50,257 ids;
// version 7 (magic 20240801) stores uint32 tokens for Llama 3's 128,256.
// The tokens follow the header with no padding. A shard is mapped rather
// than read: a training run touches only the windows its steps ask for, and
// a 100 MB shard costs nothing until then.
#include "data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <utility>

#include "core/error.h"

namespace gpipe {

namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

TokenShard::TokenShard(const std::string& path) : path_(path) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  GPIPE_CHECK(f.fd >= 0, "token shard '", path, "': cannot open (", std::strerror(errno), ")");
  struct stat st {};
  GPIPE_CHECK(::fstat(f.fd, &st) == 0 && S_ISREG(st.st_mode), "token shard '", path,
              "': not a regular file");
  const int64_t bytes = st.st_size;
  GPIPE_CHECK(bytes >= kShardHeaderBytes, "token shard '", path, "': ", bytes,
              " bytes, shorter than the ", kShardHeaderBytes,
              "-byte header (256 int32: magic, version, token count)");
  map_ = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_PRIVATE, f.fd, 0);
  GPIPE_CHECK(map_ != MAP_FAILED, "token shard '", path, "': cannot map (", std::strerror(errno),
              ")");
  map_bytes_ = static_cast<size_t>(bytes);
  try {
    int32_t header[3];
    std::memcpy(header, map_, sizeof header);
    const int32_t magic = header[0], version = header[1];
    GPIPE_CHECK(magic == kShardMagicV1 || magic == kShardMagicV7, "token shard '", path,
                "': bad magic ", magic, " at offset 0 (expected ", kShardMagicV1, " for uint16 or ",
                kShardMagicV7, " for uint32 tokens: an llm.c shard)");
    const int32_t expected = magic == kShardMagicV1 ? 1 : 7;
    GPIPE_CHECK(version == expected, "token shard '", path, "': version ", version,
                " at offset 4 disagrees with magic ", magic, " (expected version ", expected, ")");
    token_bytes_ = version == 1 ? 2 : 4;
    const int64_t count = header[2];
    const int64_t room = (bytes - kShardHeaderBytes) / token_bytes_;
    GPIPE_CHECK(count >= 0 && count <= room, "token shard '", path,
                "': the header at offset 8 "
                "declares ",
                count, " tokens but the file holds room for ", room, " (", bytes, " bytes, ",
                token_bytes_, " per token after the ", kShardHeaderBytes,
                "-byte header): truncated?");
    size_ = count;
    data_ = static_cast<const unsigned char*>(map_) + kShardHeaderBytes;
  } catch (...) {
    unmap();
    throw;
  }
}

TokenShard::~TokenShard() { unmap(); }

void TokenShard::unmap() {
  if (map_ != nullptr && map_ != MAP_FAILED) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  data_ = nullptr;
}

TokenShard::TokenShard(TokenShard&& o) noexcept { *this = std::move(o); }

TokenShard& TokenShard::operator=(TokenShard&& o) noexcept {
  if (this != &o) {
    unmap();
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    token_bytes_ = o.token_bytes_;
    max_id_ = o.max_id_;
  }
  return *this;
}

void TokenShard::read(int64_t first, int64_t n, std::vector<int64_t>& out) const {
  GPIPE_CHECK(first >= 0 && n >= 0 && first + n <= size_, "token shard '", path_, "': tokens [",
              first, ", ", first + n, ") are outside its ", size_);
  out.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = (*this)[first + i];
}

int64_t TokenShard::max_id() const {
  if (max_id_ < 0) {
    int64_t m = 0;
    if (token_bytes_ == 2) {
      const auto* p = reinterpret_cast<const uint16_t*>(data_);
      for (int64_t i = 0; i < size_; ++i) m = std::max<int64_t>(m, p[i]);
    } else {
      const auto* p = reinterpret_cast<const uint32_t*>(data_);
      for (int64_t i = 0; i < size_; ++i) m = std::max<int64_t>(m, p[i]);
    }
    max_id_ = m;
  }
  return max_id_;
}

void write_token_shard(const std::string& path, const std::vector<int64_t>& tokens, int version) {
  GPIPE_CHECK(version == 1 || version == 7, "token shard '", path, "': version ", version,
              " (expected 1: uint16 tokens, or 7: uint32 tokens)");
  const int64_t limit = version == 1 ? 65535 : 4294967295LL;
  GPIPE_CHECK(tokens.size() <= 2147483647u, "token shard '", path, "': ", tokens.size(),
              " tokens, more than a header's int32 count can hold (split them into shards)");
  for (size_t i = 0; i < tokens.size(); ++i)
    GPIPE_CHECK(tokens[i] >= 0 && tokens[i] <= limit, "token shard '", path, "': token id ",
                tokens[i], " at position ", i, " does not fit a version ", version,
                " shard (ids 0..", limit,
                version == 1 ? "; write version 7 for uint32 tokens)" : ")");
  int32_t header[kShardHeaderInts] = {};
  header[0] = version == 1 ? kShardMagicV1 : kShardMagicV7;
  header[1] = version;
  header[2] = static_cast<int32_t>(tokens.size());
  std::string body;
  const size_t width = version == 1 ? 2 : 4;
  body.resize(tokens.size() * width);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (version == 1) {
      const uint16_t v = static_cast<uint16_t>(tokens[i]);
      std::memcpy(&body[i * 2], &v, 2);
    } else {
      const uint32_t v = static_cast<uint32_t>(tokens[i]);
      std::memcpy(&body[i * 4], &v, 4);
    }
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    GPIPE_CHECK(out.good(), "token shard '", path, "': cannot write '", tmp, "'");
    out.write(reinterpret_cast<const char*>(header), sizeof header);
    out.write(body.data(), static_cast<std::streamsize>(body.size()));
    out.flush();
    GPIPE_CHECK(out.good(), "token shard '", path, "': writing '", tmp, "' failed (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw Error(detail::concat("token shard '", path, "': cannot rename '", tmp, "' over it (",
                               std::strerror(err), ")"));
  }
}

}  // namespace gpipe
