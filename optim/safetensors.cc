// safetensors reader/writer.
//
// Writing: the header lists tensors in data order, widest dtype first (then
// in the caller's order), and is padded with spaces to a multiple of 8 bytes
// after the length field, as the reference implementation does; every
// tensor's bytes are then aligned to its element size, so readers can mmap.
// The bytes go to "<path>.tmp.<pid>", which is fsync'd and renamed over
// `path` (then the directory is fsync'd, best effort): see Note [Atomic save].
// Temporaries of `path` left by writers that no longer run are removed first
// (Note [Stale temporaries] in stale_temp.cc).
//
// Reading: validates the whole header before reading any data. Like the
// reference implementation, the data regions must tile the data section
// exactly (no overlaps, gaps or trailing bytes).
#include "optim/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <unordered_set>

#include "core/autograd.h"
#include "optim/json.h"
#include "optim/stale_temp.h"

namespace gpipe::optim {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts need byte swaps");

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypes[] = {
    {DType::kFloat64, "F64"}, {DType::kInt64, "I64"},     {DType::kFloat32, "F32"},
    {DType::kInt32, "I32"},   {DType::kBFloat16, "BF16"}, {DType::kFloat16, "F16"},
};

std::optional<std::string> dtype_tag(DType dtype) {
  for (const DTypeName& d : kDTypes)
    if (d.dtype == dtype) return std::string(d.name);
  return std::nullopt;
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (const DTypeName& d : kDTypes)
    if (name == d.name) return d.dtype;
  return std::nullopt;
}

std::string errno_text(int err) { return std::strerror(err); }

// --- writing ---

// Note [Atomic save]: a reader (or a resumed job after a crash) must never
// see a half-written checkpoint. POSIX rename() within one directory
// atomically replaces the target, and fsync before it makes sure the new
// bytes are on disk before the name points at them. On any failure the
// temporary file is unlinked, so nothing is left behind.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path) : path_(path), tmp_(temporary_path(path)) {
    remove_stale_temporaries(path);  // Note [Stale temporaries] in stale_temp.cc
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    GPIPE_CHECK(fd_ >= 0, "save_safetensors: cannot create '", tmp_, "' for '", path_,
                "': ", errno_text(errno));
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t n = ::write(fd_, p, std::min<size_t>(bytes, size_t{1} << 30));
      if (n < 0 && errno == EINTR) continue;
      GPIPE_CHECK(n > 0, "save_safetensors: writing '", tmp_, "' failed: ", errno_text(errno));
      p += n;
      bytes -= static_cast<size_t>(n);
    }
  }

  void commit() {
    GPIPE_CHECK(::fsync(fd_) == 0, "save_safetensors: fsync of '", tmp_,
                "' failed: ", errno_text(errno));
    const int rc = ::close(fd_);
    fd_ = -1;
    GPIPE_CHECK(rc == 0, "save_safetensors: closing '", tmp_, "' failed: ", errno_text(errno));
    GPIPE_CHECK(::rename(tmp_.c_str(), path_.c_str()) == 0, "save_safetensors: cannot rename '",
                tmp_, "' to '", path_, "': ", errno_text(errno));
    committed_ = true;
    // Make the rename itself durable. Best effort: some file systems refuse.
    const size_t slash = path_.rfind('/');
    const std::string dir = slash == std::string::npos ? "."
                            : slash == 0               ? "/"
                                                       : path_.substr(0, slash);
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// A contiguous CPU tensor with t's values (t itself when it already is one).
Tensor host_contiguous(const Tensor& t) {
  Tensor c = t.device().is_cpu() ? t : t.to(kCpu);
  return c.contiguous();
}

}  // namespace

std::string safetensors_dtype_name(DType dtype) {
  const auto tag = dtype_tag(dtype);
  GPIPE_CHECK(tag.has_value(), "safetensors cannot hold dtype ", dtype);
  return *tag;
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string where = "save_safetensors: '" + path + "': ";
  std::unordered_set<std::string> names;
  std::vector<size_t> order;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    GPIPE_CHECK(!name.empty(), where, "tensor ", i, " has an empty name");
    GPIPE_CHECK(name != "__metadata__", where,
                "'__metadata__' is reserved and cannot name a tensor");
    GPIPE_CHECK(names.insert(name).second, where, "two tensors are named '", name, "'");
    GPIPE_CHECK(t.defined(), where, "tensor '", name, "' is undefined");
    GPIPE_CHECK(dtype_tag(t.dtype()).has_value(), where, "tensor '", name, "' has dtype ",
                t.dtype(), ", which safetensors cannot hold");
    order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors[a].second.dtype()) > dtype_size(tensors[b].second.dtype());
  });

  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      header += (first ? "" : ",") + json::quote(k) + ":" + json::quote(v);
      first = false;
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const auto& [name, t] = tensors[i];
    if (header.size() > 1) header += ",";
    header +=
        json::quote(name) + ":{\"dtype\":\"" + safetensors_dtype_name(t.dtype()) + "\",\"shape\":[";
    for (int64_t d = 0; d < t.rank(); ++d) header += (d ? "," : "") + std::to_string(t.size(d));
    const uint64_t end = offset + t.nbytes();
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  header += "}";
  while ((8 + header.size()) % 8 != 0) header += ' ';

  NoGradGuard no_grad;
  AtomicFile file(path);
  uint64_t n = header.size();
  unsigned char length[8];
  for (int b = 0; b < 8; ++b) length[b] = static_cast<unsigned char>(n >> (8 * b));
  file.write(length, 8);
  file.write(header.data(), header.size());
  for (size_t i : order) {
    const Tensor c = host_contiguous(tensors[i].second);
    file.write(c.raw_data(), c.nbytes());
  }
  file.commit();
}

// --- reading ---

namespace {

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail(errno == ENOENT ? std::string("no such file") : errno_text(errno));
    struct stat st;
    const bool ok = ::fstat(fd_, &st) == 0;
    const int err = errno;
    if (!ok || !S_ISREG(st.st_mode)) {
      ::close(fd_);  // the destructor does not run when a constructor throws
      fail(ok ? std::string("not a regular file") : errno_text(err));
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~Reader() {
    if (fd_ >= 0) ::close(fd_);
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  uint64_t size() const { return size_; }

  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    throw Error(detail::concat("safetensors file '", path_, "': ", parts...));
  }

  void read(uint64_t offset, void* dst, uint64_t bytes) const {
    char* p = static_cast<char*>(dst);
    while (bytes > 0) {
      const ssize_t n =
          ::pread(fd_, p, std::min<uint64_t>(bytes, uint64_t{1} << 30), static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("read failed: ", errno_text(errno));
      if (n == 0) fail("truncated: the file ended while reading byte ", offset);
      p += n;
      offset += static_cast<uint64_t>(n);
      bytes -= static_cast<uint64_t>(n);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

std::string offsets_text(const Entry& e) { return detail::concat("[", e.begin, ", ", e.end, "]"); }

Entry parse_entry(const Reader& r, const std::string& name, const json::Value& info) {
  using Kind = json::Value::Kind;
  if (info.kind != Kind::kObject)
    r.fail("tensor '", name, "': expected an object, got a JSON ", json::kind_name(info.kind));
  const json::Value* dtype = info.find("dtype");
  const json::Value* shape = info.find("shape");
  const json::Value* offsets = info.find("data_offsets");
  if (!dtype || dtype->kind != Kind::kString)
    r.fail("tensor '", name, "': missing string \"dtype\"");
  if (!shape || shape->kind != Kind::kArray) r.fail("tensor '", name, "': missing array \"shape\"");
  if (!offsets || offsets->kind != Kind::kArray || offsets->items.size() != 2)
    r.fail("tensor '", name, "': \"data_offsets\" must be an array [begin, end]");
  Entry e;
  e.name = name;
  const auto dt = parse_dtype(dtype->text);
  if (!dt)
    r.fail("tensor '", name, "': unknown or unsupported dtype '", dtype->text,
           "' (supported: F32, F64, I32, I64, BF16, F16)");
  e.dtype = *dt;
  std::vector<int64_t> dims;
  for (const json::Value& d : shape->items) {
    const auto v = d.as_uint();
    if (!v || *v > static_cast<uint64_t>(INT64_MAX))
      r.fail("tensor '", name, "': shape entries must be non-negative integers");
    dims.push_back(static_cast<int64_t>(*v));
  }
  // The extent (empty axes counted as 1) times the element size must fit in
  // 62 bits: it bounds the bytes and every stride of the tensor.
  if (!bounded_extent(dims, (int64_t{1} << 62) / static_cast<int64_t>(dtype_size(e.dtype))))
    r.fail("tensor '", name, "': shape is too large");
  e.shape = Shape(std::move(dims));
  const uint64_t bytes = static_cast<uint64_t>(e.shape.numel()) * dtype_size(e.dtype);
  const auto begin = offsets->items[0].as_uint(), end = offsets->items[1].as_uint();
  if (!begin || !end) r.fail("tensor '", name, "': data_offsets must be non-negative integers");
  e.begin = *begin;
  e.end = *end;
  if (e.begin > e.end)
    r.fail("tensor '", name, "': data_offsets ", offsets_text(e), " end before they begin");
  if (e.end - e.begin != bytes)
    r.fail("tensor '", name, "': data_offsets ", offsets_text(e), " hold ", e.end - e.begin,
           " bytes, but shape ", e.shape, " of dtype ", dtype->text, " needs ", bytes);
  return e;
}

// Reads the length field and parses the JSON header; sets `*header_bytes`.
json::Value read_header(const Reader& r, uint64_t* header_bytes) {
  if (r.size() < 8)
    r.fail("truncated: the file has ", r.size(), " bytes, fewer than the 8-byte header length");
  unsigned char length[8];
  r.read(0, length, 8);
  uint64_t n = 0;
  for (int b = 0; b < 8; ++b) n |= static_cast<uint64_t>(length[b]) << (8 * b);
  if (n > r.size() - 8)
    r.fail("truncated: header length ", n, " exceeds the ", r.size() - 8,
           " bytes after the length field");
  if (n > kMaxHeaderBytes) r.fail("header length ", n, " exceeds the limit of ", kMaxHeaderBytes);
  std::string text(n, '\0');
  r.read(8, text.data(), n);
  json::Value header;
  try {
    header = json::parse(text);
  } catch (const Error& e) {
    r.fail("header is not valid JSON: ", e.what());
  }
  if (header.kind != json::Value::Kind::kObject)
    r.fail("header is a JSON ", json::kind_name(header.kind), ", expected an object");
  *header_bytes = n;
  return header;
}

// Checks that the entries' regions tile [0, data_bytes) exactly.
void check_tiling(const Reader& r, const std::vector<Entry>& entries, uint64_t data_bytes) {
  std::vector<const Entry*> sorted;
  for (const Entry& e : entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const Entry* last = nullptr;  // the entry that reaches `covered`
  for (const Entry* e : sorted) {
    if (e->end > data_bytes)
      r.fail("truncated: tensor '", e->name, "' has data_offsets ", offsets_text(*e),
             " but the data section has only ", data_bytes, " bytes");
    if (e->begin < covered)
      r.fail("tensors '", last->name, "' and '", e->name, "' overlap (data_offsets ",
             offsets_text(*last), " and ", offsets_text(*e), ")");
    if (e->begin > covered)
      r.fail("data bytes [", covered, ", ", e->begin, ") belong to no tensor (before '", e->name,
             "')");
    covered = e->end;
    if (e->end > e->begin || !last) last = e;
  }
  if (covered != data_bytes)
    r.fail("the data section has ", data_bytes, " bytes but the tensors cover only ", covered);
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  const Reader r(path);
  uint64_t header_bytes = 0;
  const json::Value header = read_header(r, &header_bytes);

  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.members) {
    if (name == "__metadata__") {
      if (info.kind != json::Value::Kind::kObject) r.fail("__metadata__ must be an object");
      for (const auto& [k, v] : info.members) {
        if (v.kind != json::Value::Kind::kString)
          r.fail("__metadata__ value of '", k, "' is a JSON ", json::kind_name(v.kind),
                 ", expected a string");
        out.metadata[k] = v.text;
      }
      continue;
    }
    entries.push_back(parse_entry(r, name, info));
  }
  const uint64_t data_start = 8 + header_bytes;
  check_tiling(r, entries, r.size() - data_start);

  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype, kCpu);
    r.read(data_start + e.begin, t.raw_data(), e.end - e.begin);
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

}  // namespace gpipe::optim
