#include "runtime/communicator.h"

#include <cstring>

#include "core/autograd.h"

namespace gpipe {
namespace {

constexpr uint32_t kMagic = 0x424d5047;  // "GPMB"

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <class T>
T get(const std::string& in, size_t& at) {
  GPIPE_CHECK(at + sizeof(T) <= in.size(), "message header: truncated at byte ", at, " of ",
              in.size());
  T v;
  std::memcpy(&v, in.data() + at, sizeof(T));
  at += sizeof(T);
  return v;
}

}  // namespace

static DeviceCommunicatorFactory& factory_slot(DeviceType type) {
  static DeviceCommunicatorFactory slots[kNumDeviceTypes] = {};
  return slots[static_cast<int>(type)];
}

void register_device_communicator(DeviceType type, DeviceCommunicatorFactory factory) {
  factory_slot(type) = factory;
}

std::shared_ptr<Communicator> communicator_for(std::shared_ptr<Communicator> base, Device device) {
  DeviceCommunicatorFactory f = factory_slot(device.type);
  if (device.is_cpu() || f == nullptr || !base->spans_processes()) return base;
  return f(std::move(base), device);
}

void Communicator::allreduce_sum(Tensor& t, const char* what) {
  GPIPE_CHECK(t.is_contiguous(), what, ": allreduce needs a contiguous tensor");
  if (!t.device().is_cpu()) {  // staged through host memory
    NoGradGuard no_grad;
    Tensor host = t.to(kCpu).contiguous();
    allreduce_sum(host, what);
    t.copy_from(host.to(t.device()));
    return;
  }
  if (t.dtype() == DType::kFloat32)
    allreduce(t.data<float>(), t.numel(), ReduceOp::kSum, what);
  else if (t.dtype() == DType::kFloat64)
    allreduce(t.data<double>(), t.numel(), ReduceOp::kSum, what);
  else
    throw Error(detail::concat(what, ": allreduce of ", t.dtype(),
                               " tensors is not supported (float32 or float64)"));
}

std::vector<Tensor> Communicator::share_tensors(const Tensor& /*mine*/, const char* what) {
  throw Error(detail::concat(what, ": sharing tensors needs a group of threads of one process (",
                             size(), " members here span processes)"));
}

std::string encode_header(const Message& m) {
  std::string out;
  put<uint32_t>(out, kMagic);
  put<uint32_t>(out, static_cast<uint32_t>(m.tensors.size()));
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const Tensor& t = m.tensors[i];
    put<uint8_t>(out, t.defined() ? 1 : 0);
    put<uint8_t>(out, i < m.requires_grad.size() && m.requires_grad[i] ? 1 : 0);
    if (!t.defined()) continue;
    put<uint8_t>(out, static_cast<uint8_t>(t.dtype()));
    put<uint8_t>(out, static_cast<uint8_t>(t.rank()));
    for (int64_t d : t.shape().dims()) put<int64_t>(out, d);
  }
  return out;
}

namespace {

// The largest tensor a header may describe: 2^40 elements (a larger one is a
// corrupt or foreign header, refused before anything is allocated).
constexpr int64_t kMaxMessageElements = int64_t{1} << 40;

struct TensorHeader {
  bool defined = false, requires_grad = false;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  size_t nbytes() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;  // bounded by decode's checks
    return static_cast<size_t>(n) * dtype_size(dtype);
  }
};

std::vector<TensorHeader> decode(const std::string& bytes, size_t& at) {
  GPIPE_CHECK(get<uint32_t>(bytes, at) == kMagic,
              "message header: bad magic number (not a gpipe message)");
  const uint32_t n = get<uint32_t>(bytes, at);
  GPIPE_CHECK(n < 4096, "message header: implausible tensor count ", n);
  std::vector<TensorHeader> out(n);
  for (TensorHeader& h : out) {
    h.defined = get<uint8_t>(bytes, at) != 0;
    h.requires_grad = get<uint8_t>(bytes, at) != 0;
    if (!h.defined) continue;
    const int dtype = get<uint8_t>(bytes, at);
    GPIPE_CHECK(dtype <= static_cast<int>(DType::kFloat16), "message header: unknown dtype ",
                dtype);
    h.dtype = static_cast<DType>(dtype);
    const int ndim = get<uint8_t>(bytes, at);
    GPIPE_CHECK(ndim <= 8, "message header: implausible rank ", ndim, " (at most 8)");
    for (int d = 0; d < ndim; ++d) h.dims.push_back(get<int64_t>(bytes, at));
    GPIPE_CHECK(bounded_extent(h.dims, kMaxMessageElements).has_value(),
                "message header: implausible shape ", Shape(h.dims), " (non-negative sizes, ",
                "at most ", kMaxMessageElements, " elements, empty axes counted as 1)");
  }
  return out;
}

// Tensors allocated (uninitialised) on `device` for the headers.
Message allocate(const std::vector<TensorHeader>& headers, Device device) {
  Message m;
  MemoryCategoryGuard cat(MemoryCategory::kActivation);
  for (const TensorHeader& h : headers) {
    m.requires_grad.push_back(h.requires_grad);
    m.tensors.push_back(h.defined ? Tensor::empty(Shape(h.dims), h.dtype, device) : Tensor());
  }
  return m;
}

}  // namespace

Message decode_header(const std::string& header, Device device) {
  size_t at = 0;
  const std::vector<TensorHeader> headers = decode(header, at);
  GPIPE_CHECK(at == header.size(), "message header: ", header.size() - at, " trailing bytes");
  return allocate(headers, device);
}

std::string serialize_message(const Message& m) {
  std::string out = encode_header(m);
  put<uint64_t>(out, out.size());
  NoGradGuard no_grad;
  for (const Tensor& t : m.tensors) {
    if (!t.defined()) continue;
    const Tensor c = t.device().is_cpu() ? t.contiguous() : t.to(kCpu).contiguous();
    out.append(static_cast<const char*>(c.raw_data()), c.nbytes());
  }
  return out;
}

Message deserialize_message(const std::string& bytes, Device device) {
  size_t at = 0;
  const std::vector<TensorHeader> headers = decode(bytes, at);
  GPIPE_CHECK(get<uint64_t>(bytes, at) == at - sizeof(uint64_t), "message: header length mismatch");
  // The payload sizes are checked before anything is allocated.
  size_t payload = 0;
  for (const TensorHeader& h : headers)
    if (h.defined) payload += h.nbytes();
  GPIPE_CHECK(payload <= bytes.size() - at, "message: payload truncated (", bytes.size() - at,
              " bytes after the header, the header describes ", payload, ")");
  GPIPE_CHECK(payload == bytes.size() - at, "message: ", bytes.size() - at - payload,
              " trailing bytes");
  Message m = allocate(headers, kCpu);
  NoGradGuard no_grad;
  for (Tensor& t : m.tensors) {
    if (!t.defined()) continue;
    std::memcpy(t.raw_data(), bytes.data() + at, t.nbytes());
    at += t.nbytes();
    if (device != kCpu) t = t.to(device);
  }
  return m;
}

}  // namespace gpipe
