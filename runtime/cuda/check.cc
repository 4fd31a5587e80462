// Status-to-exception conversion for the wrappers in check.h.
#include "runtime/cuda/check.h"

#include <string>

#include "core/error.h"

namespace gpipe::cuda {
namespace {

[[noreturn]] void raise(const char* library, const char* call, const std::string& what,
                        const char* file, int line) {
  throw Error(detail::concat(library, " call ", call, " failed: ", what, " at ", file, ":", line));
}

}  // namespace

void throw_status(cudaError_t status, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so later calls do not report it again
  raise("CUDA", call,
        detail::concat(cudaGetErrorName(status), " (", cudaGetErrorString(status), ")"), file,
        line);
}

void throw_status(cublasStatus_t status, const char* call, const char* file, int line) {
  raise("cuBLAS", call,
        detail::concat(cublasGetStatusName(status), " (", cublasGetStatusString(status), ")"), file,
        line);
}

void throw_status(cudnnStatus_t status, const char* call, const char* file, int line) {
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  std::string what = cudnnGetErrorString(status);
  if (last[0] != '\0') what += detail::concat(": ", last);
  raise("cuDNN", call, what, file, line);
}

void throw_status(ncclResult_t status, const char* call, const char* file, int line) {
  raise("NCCL", call, ncclGetErrorString(status), file, line);
}

}  // namespace gpipe::cuda
