// Dense (no sparsity) peaks in TFLOP/s for the benchmarks' "% of peak" and
// MFU: the published figures of the device named, or
// GPIPE_PEAK_TFLOPS_{BF16,TF32,FP32,FP64} from the environment; 0 = unknown
// (no percentage printed).
#pragma once

#include <cstdlib>
#include <string>

namespace gpipe::testing {

struct Peaks {
  double bf16 = 0, tf32 = 0, fp32 = 0, fp64 = 0;
};

inline Peaks device_peaks(const std::string& name) {
  Peaks p;
  // H100 SXM and H200 (SXM and NVL share the H100 SXM's tensor-core rates).
  if (name.find("H200") != std::string::npos ||
      (name.find("H100") != std::string::npos && name.find("PCIe") == std::string::npos))
    p = {989.4, 494.7, 66.9, 66.9};
  auto env = [](const char* var, double& v) {
    if (const char* e = std::getenv(var)) v = std::atof(e);
  };
  env("GPIPE_PEAK_TFLOPS_BF16", p.bf16);
  env("GPIPE_PEAK_TFLOPS_TF32", p.tf32);
  env("GPIPE_PEAK_TFLOPS_FP32", p.fp32);
  env("GPIPE_PEAK_TFLOPS_FP64", p.fp64);
  return p;
}

}  // namespace gpipe::testing
