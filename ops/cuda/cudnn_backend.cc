// cuDNN graph-API plumbing: RAII descriptors, engine selection, execution.
//
// Engine selection: heuristics (CUDNN_HEUR_MODE_A, then CUDNN_HEUR_MODE_
// FALLBACK) rank engine configurations for a finalized operation graph; each
// configuration's engine lists numerical notes (tensor cores, down-converted
// inputs, non-determinism, ...). build_plan walks the policy's rounds from
// strictest to loosest and keeps the first configuration that passes the
// round's filter and finalizes into an execution plan: a configuration that
// cannot run this graph on this GPU fails to finalize with a NOT_SUPPORTED
// status, which is expected and skipped. Runtime-compiled engines (NVRTC at
// plan-build time, seconds each) are left to the last round.
//
// The operation graph and plan bind the cuDNN handle through the
// CUDNN_ATTR_OPERATIONGRAPH_HANDLE / CUDNN_ATTR_EXECUTION_PLAN_HANDLE
// attributes. cuDNN 9.19 marks those two enumerators deprecated in favour of
// device-property descriptors, which exist for building plans without a GPU
// (ahead-of-time compilation); with a device at hand the handle remains the
// way to bind one, and the deprecation warning is off unless
// CUDNN_WARN_DEPRECATED is defined.
#include "ops/cuda/cudnn_backend.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/cuda/check.h"

namespace gpipe::ops::cuda::cudnn {
namespace {

const char* note_name(cudnnBackendNumericalNote_t n) {
  switch (n) {
    case CUDNN_NUMERICAL_NOTE_TENSOR_CORE:
      return "tensor_core";
    case CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS:
      return "down_convert_inputs";
    case CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION:
      return "reduced_precision_reduction";
    case CUDNN_NUMERICAL_NOTE_FFT:
      return "fft";
    case CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC:
      return "nondeterministic";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD:
      return "winograd";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4:
      return "winograd_4x4";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6:
      return "winograd_6x6";
    case CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13:
      return "winograd_13x13";
    case CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP:
      return "strict_nan_prop";
    default:
      return "?";
  }
}

// The engine configurations the heuristics propose for `graph` in `mode` (possibly none).
std::vector<Descriptor> heuristic_configs(const Descriptor& graph, cudnnBackendHeurMode_t mode) {
  Descriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (heur.try_finalize() != CUDNN_STATUS_SUCCESS) return {};
  int64_t count = 0;
  GPIPE_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  int64_t got = 0;
  if (count > 0)
    GPIPE_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                               raw.data()));
  configs.resize(static_cast<size_t>(std::min(got, count)));
  return configs;
}

struct EngineInfo {
  int64_t index = -1;
  std::vector<cudnnBackendNumericalNote_t> notes;
  bool runtime_compiled = false;
};

// Drops cuDNN's last-error text after a failure that was expected and
// handled, so a later real error does not report it.
void clear_last_error() {
  char discard[256];
  cudnnGetLastErrorString(discard, sizeof(discard));
}

// The engine behind a configuration and its notes. Should cuDNN fail to
// describe it, it is treated as runtime-compiled: only the last round takes it.
EngineInfo describe_engine(const Descriptor& config) {
  EngineInfo info;
  info.runtime_compiled = true;
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t got = 0;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                               &raw) != CUDNN_STATUS_SUCCESS)
    return info;
  int64_t index = -1;
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                               &got, &index) == CUDNN_STATUS_SUCCESS)
    info.index = index;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t n = 0;
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                               CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n,
                               notes) != CUDNN_STATUS_SUCCESS)
    return info;
  info.notes.assign(notes, notes + std::clamp<int64_t>(n, 0, CUDNN_NUMERICAL_NOTE_TYPE_COUNT));
  cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE,
                               CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n,
                               behavior) != CUDNN_STATUS_SUCCESS)
    return info;
  info.runtime_compiled = false;
  for (int64_t i = 0; i < std::clamp<int64_t>(n, 0, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT); ++i)
    info.runtime_compiled |= behavior[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
  return info;
}

EngineInfo engine_info(const Descriptor& config) {
  EngineInfo info = describe_engine(config);
  clear_last_error();
  return info;
}

bool has_any(const std::vector<cudnnBackendNumericalNote_t>& notes,
             const std::vector<cudnnBackendNumericalNote_t>& forbidden) {
  for (auto n : notes)
    for (auto f : forbidden)
      if (n == f) return true;
  return false;
}

}  // namespace

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) {
  GPIPE_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_));
}

Descriptor::~Descriptor() {
  if (d_ != nullptr) (void)cudnnBackendDestroyDescriptor(d_);
}

Descriptor& Descriptor::operator=(Descriptor&& o) noexcept {
  if (this != &o) {
    if (d_ != nullptr) (void)cudnnBackendDestroyDescriptor(d_);
    d_ = o.d_;
    o.d_ = nullptr;
  }
  return *this;
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                            int64_t count, const void* values) {
  GPIPE_CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, count, values));
  return *this;
}

Descriptor& Descriptor::set_int64(cudnnBackendAttributeName_t name, int64_t value) {
  return set(name, CUDNN_TYPE_INT64, 1, &value);
}

Descriptor& Descriptor::set_int64s(cudnnBackendAttributeName_t name,
                                   const std::vector<int64_t>& values) {
  return set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.data());
}

Descriptor& Descriptor::set_descriptor(cudnnBackendAttributeName_t name, const Descriptor& value) {
  cudnnBackendDescriptor_t raw = value.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
}

Descriptor& Descriptor::set_data_type(cudnnBackendAttributeName_t name, cudnnDataType_t value) {
  return set(name, CUDNN_TYPE_DATA_TYPE, 1, &value);
}

Descriptor& Descriptor::set_handle(cudnnBackendAttributeName_t name, cudnnHandle_t handle) {
  return set(name, CUDNN_TYPE_HANDLE, 1, &handle);
}

Descriptor& Descriptor::finalize() {
  GPIPE_CUDNN_CHECK(cudnnBackendFinalize(d_));
  return *this;
}

cudnnStatus_t Descriptor::try_finalize() {
  const cudnnStatus_t s = cudnnBackendFinalize(d_);
  if (s != CUDNN_STATUS_SUCCESS) clear_last_error();
  return s;
}

int64_t Descriptor::get_int64(cudnnBackendAttributeName_t name) const {
  int64_t value = 0, got = 0;
  GPIPE_CUDNN_CHECK(cudnnBackendGetAttribute(d_, name, CUDNN_TYPE_INT64, 1, &got, &value));
  return value;
}

Descriptor tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t>& dims,
                  int64_t alignment) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int64_t d = static_cast<int64_t>(dims.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * dims[d + 1];
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  t.set_int64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
      .set_data_type(CUDNN_ATTR_TENSOR_DATA_TYPE, type)
      .set_int64s(CUDNN_ATTR_TENSOR_DIMENSIONS, dims)
      .set_int64s(CUDNN_ATTR_TENSOR_STRIDES, strides)
      .set_int64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, alignment)
      .finalize();
  return t;
}

Plan build_plan(cudnnHandle_t handle, const Descriptor& graph, const PlanPolicy& policy,
                const std::string& what) {
  std::vector<Descriptor> configs = heuristic_configs(graph, CUDNN_HEUR_MODE_A);
  for (Descriptor& d : heuristic_configs(graph, CUDNN_HEUR_MODE_FALLBACK))
    configs.push_back(std::move(d));
  std::vector<EngineInfo> infos;
  for (const Descriptor& c : configs) infos.push_back(engine_info(c));
  for (size_t round = 0; round < policy.rounds.size(); ++round) {
    for (size_t i = 0; i < configs.size(); ++i) {
      const PlanRound& r = policy.rounds[round];
      if (has_any(infos[i].notes, r.forbidden)) continue;
      if (infos[i].runtime_compiled && !r.runtime_compiled) continue;
      Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set_handle(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle)
          .set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i]);
      if (plan.try_finalize() != CUDNN_STATUS_SUCCESS) continue;
      const int64_t ws = plan.get_int64(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE);
      if (ws > policy.max_workspace) continue;
      Plan out;
      out.plan = std::move(plan);
      out.workspace = ws;
      out.engine = infos[i].index;
      out.round = static_cast<int>(round);
      out.keep_alive.push_back(std::move(configs[i]));
      for (auto n : infos[i].notes)
        out.notes += std::string(out.notes.empty() ? "" : ",") + note_name(n);
      if (infos[i].runtime_compiled)
        out.notes += std::string(out.notes.empty() ? "" : ",") + "runtime_compiled";
      return out;
    }
  }
  throw Error(detail::concat(what, ": cuDNN offers no usable engine (", configs.size(),
                             " configurations proposed, none passed the numerical-note filters, "
                             "the workspace limit of ",
                             policy.max_workspace, " bytes and plan finalization)"));
}

void execute(cudnnHandle_t handle, const Plan& plan, const std::vector<int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace) {
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set_int64s(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids)
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           static_cast<int64_t>(pointers.size()), pointers.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace)
      .finalize();
  GPIPE_CUDNN_CHECK(cudnnBackendExecute(handle, plan.plan.get(), pack.get()));
}

}  // namespace gpipe::ops::cuda::cudnn
