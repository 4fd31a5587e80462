// A thin C++ layer over the cuDNN 9 graph API (the "backend" descriptors of
// cudnn_graph.h), enough to build, cache and run single-operation graphs.
// The legacy descriptor API (cudnnConvolutionForward and friends) is
// deprecated throughout cuDNN 9, so gpipe does not use it.
#pragma once

#include <cudnn_graph.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe::ops::cuda::cudnn {

// Owns one backend descriptor. Setters return *this; errors throw gpipe::Error.
class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(Descriptor&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Descriptor& operator=(Descriptor&& o) noexcept;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }

  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                  const void* values);
  Descriptor& set_int64(cudnnBackendAttributeName_t name, int64_t value);
  Descriptor& set_int64s(cudnnBackendAttributeName_t name, const std::vector<int64_t>& values);
  Descriptor& set_descriptor(cudnnBackendAttributeName_t name, const Descriptor& value);
  Descriptor& set_data_type(cudnnBackendAttributeName_t name, cudnnDataType_t value);
  Descriptor& set_handle(cudnnBackendAttributeName_t name, cudnnHandle_t handle);
  Descriptor& finalize();        // throws on failure
  cudnnStatus_t try_finalize();  // returns the status instead (clearing cuDNN's last error)
  int64_t get_int64(cudnnBackendAttributeName_t name) const;

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// A tensor descriptor: packed row-major strides for `dims`.
Descriptor tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t>& dims,
                  int64_t alignment);

// Which engines a plan may use. Rounds are tried in order; within a round,
// engine configurations come in heuristic order (mode A, then the fallback
// list) and the first that avoids every numerical note in `forbidden`, is
// precompiled (unless `runtime_compiled` is allowed: such engines are
// compiled with NVRTC while the plan is built, which costs seconds), fits
// `max_workspace` and finalizes into a plan wins.
struct PlanRound {
  std::vector<cudnnBackendNumericalNote_t> forbidden;
  bool runtime_compiled = false;
};
struct PlanPolicy {
  std::vector<PlanRound> rounds;
  int64_t max_workspace = int64_t{1} << 30;
};

struct Plan {
  Descriptor plan;
  int64_t workspace = 0;  // bytes
  int64_t engine = -1;    // cuDNN's global engine index (for logs)
  std::string notes;      // the engine's numerical notes, e.g. "tensor_core"
  int round = 0;          // the PlanPolicy round that admitted it
  // The graph's descriptors (operation graph, engine configuration, ...),
  // kept for as long as the plan lives.
  std::vector<Descriptor> keep_alive;
};

// Throws gpipe::Error naming `what` if no engine qualifies.
Plan build_plan(cudnnHandle_t handle, const Descriptor& graph, const PlanPolicy& policy,
                const std::string& what);

// Runs `plan` on the handle's stream with tensors uids[i] at pointers[i].
void execute(cudnnHandle_t handle, const Plan& plan, const std::vector<int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace);

}  // namespace gpipe::ops::cuda::cudnn
