// Convolutional building blocks (NCHW): Conv2d, separable Conv2d, BatchNorm,
// pooling. BatchNorm follows the pipeline's contract: each forward in
// training normalises with its own (micro-)batch statistics and only records
// them; finish_step() folds everything recorded since the last step into the
// running statistics once, as if the whole mini-batch had been seen, and a
// recomputed forward (inside rematerialise) records nothing.
#pragma once

#include <array>
#include <mutex>

#include "layers/basic.h"
#include "ops/conv.h"
#include "ops/pool.h"

namespace gpipe {

class Conv2d final : public UnaryLayer {
 public:
  Conv2d(std::string name, int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel,
         uint64_t seed, ops::Conv2dOptions opt = {}, bool bias = false);
  Tensor forward(const Tensor& x) override;
  TensorSpec output_spec(const TensorSpec& in) const override;
  double cost(const BundleSpec& in) const override;
  Tensor weight, bias;

 private:
  int64_t in_, out_;
  std::array<int64_t, 2> kernel_;
  ops::Conv2dOptions opt_;
};

// Depthwise kxk (groups = C) followed by pointwise 1x1.
class SeparableConv2d final : public UnaryLayer {
 public:
  SeparableConv2d(std::string name, int64_t in_channels, int64_t out_channels,
                  std::array<int64_t, 2> kernel, int64_t stride, uint64_t seed);
  Tensor forward(const Tensor& x) override { return pointwise_(depthwise_(x)); }
  TensorSpec output_spec(const TensorSpec& in) const override {
    return pointwise_.output_spec(depthwise_.output_spec(in));
  }
  double cost(const BundleSpec& in) const override;

 private:
  Conv2d depthwise_, pointwise_;
};

class BatchNorm final : public UnaryLayer {
 public:
  BatchNorm(std::string name, int64_t channels, double momentum = 0.1, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;
  TensorSpec output_spec(const TensorSpec& in) const override;
  double cost(const BundleSpec& in) const override;
  void finish_step() override;
  void discard_step() override;
  std::vector<double> step_statistics() const override;  // [sum (C), sum of squares (C), count]
  void set_step_statistics(const std::vector<double>& summed) override;
  Tensor gamma, beta, running_mean, running_var;

 private:
  int64_t channels_;
  double momentum_, eps_;
  // Statistics recorded since the last finish_step (sum and sum of squares
  // per channel, in float64, and the count of values per channel).
  mutable std::mutex mu_;
  std::vector<double> sum_, sumsq_;
  int64_t count_ = 0;
};

enum class PoolKind { kMax, kAvg };

class Pool2d final : public UnaryLayer {
 public:
  Pool2d(std::string name, PoolKind kind, ops::Pool2dOptions opt);
  Tensor forward(const Tensor& x) override;
  TensorSpec output_spec(const TensorSpec& in) const override;
  double cost(const BundleSpec& in) const override;

 private:
  PoolKind kind_;
  ops::Pool2dOptions opt_;
};

// [N, C, H, W] -> [N, C]
class GlobalAvgPool final : public UnaryLayer {
 public:
  explicit GlobalAvgPool(std::string name) : UnaryLayer(std::move(name)) {}
  Tensor forward(const Tensor& x) override;
  TensorSpec output_spec(const TensorSpec& in) const override;
  double cost(const BundleSpec& in) const override {
    return in.empty() ? 0 : static_cast<double>(in[0].shape.numel());
  }
};

// Output size of a conv/pool window along one axis; throws naming `who` if < 1.
int64_t window_out(const std::string& who, int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                   int64_t dilation = 1);

}  // namespace gpipe
