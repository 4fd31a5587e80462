#include "layers/conv.h"

#include <cmath>

#include "core/rng.h"
#include "ops/ops.h"

namespace gpipe {
namespace {
void expect_nchw(const std::string& who, const TensorSpec& in, int64_t channels) {
  GPIPE_CHECK(in.shape.rank() == 4 && in.shape[1] == channels, "layer '", who,
              "': expected input [N, ", channels, ", H, W], got ", in.shape);
}
}  // namespace

int64_t window_out(const std::string& who, int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                   int64_t dilation) {
  const int64_t out = (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
  GPIPE_CHECK(out >= 1, "layer '", who, "': input size ", in, " is too small for kernel ", kernel,
              " (stride ", stride, ", padding ", pad, ")");
  return out;
}

Conv2d::Conv2d(std::string name, int64_t in_channels, int64_t out_channels,
               std::array<int64_t, 2> kernel, uint64_t seed, ops::Conv2dOptions opt, bool with_bias)
    : UnaryLayer(std::move(name)),
      in_(in_channels),
      out_(out_channels),
      kernel_(kernel),
      opt_(opt) {
  GPIPE_CHECK(opt.groups > 0 && in_channels % opt.groups == 0 && out_channels % opt.groups == 0,
              "Conv2d '", this->name(), "': channels ", in_channels, " -> ", out_channels,
              " are not divisible by groups ", opt.groups);
  const int64_t fan_in = in_channels / opt.groups * kernel[0] * kernel[1];
  // He (Kaiming) normal init for ReLU networks.
  weight = make_parameter(
      Tensor::randn(Shape{out_channels, in_channels / opt.groups, kernel[0], kernel[1]},
                    mix_key(seed, 31), std::sqrt(2.0 / static_cast<double>(fan_in))));
  register_parameter("weight", &weight);
  if (with_bias) {
    bias = make_parameter(Tensor::zeros(Shape{out_channels}));
    register_parameter("bias", &bias);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  expect_nchw(name(), {x.shape(), x.dtype()}, in_);
  return ops::conv2d(x, weight, bias, opt_);
}

TensorSpec Conv2d::output_spec(const TensorSpec& in) const {
  expect_nchw(name(), in, in_);
  return {Shape{in.shape[0], out_,
                window_out(name(), in.shape[2], kernel_[0], opt_.stride[0], opt_.padding[0],
                           opt_.dilation[0]),
                window_out(name(), in.shape[3], kernel_[1], opt_.stride[1], opt_.padding[1],
                           opt_.dilation[1])},
          in.dtype};
}

double Conv2d::cost(const BundleSpec& in) const {
  if (in.empty()) return 0;
  const TensorSpec o = output_spec(in[0]);
  return 2.0 * static_cast<double>(o.shape.numel()) * (in_ / opt_.groups) * kernel_[0] * kernel_[1];
}

namespace {
ops::Conv2dOptions depthwise_opts(int64_t channels, std::array<int64_t, 2> kernel, int64_t stride) {
  ops::Conv2dOptions o;
  o.groups = channels;
  o.stride = {stride, stride};
  o.padding = {kernel[0] / 2, kernel[1] / 2};
  return o;
}
}  // namespace

SeparableConv2d::SeparableConv2d(std::string name, int64_t in_channels, int64_t out_channels,
                                 std::array<int64_t, 2> kernel, int64_t stride, uint64_t seed)
    : UnaryLayer(std::move(name)),
      depthwise_("depthwise", in_channels, in_channels, kernel, mix_key(seed, 1),
                 depthwise_opts(in_channels, kernel, stride)),
      pointwise_("pointwise", in_channels, out_channels, {1, 1}, mix_key(seed, 2)) {
  register_sublayer("depthwise", &depthwise_);
  register_sublayer("pointwise", &pointwise_);
}

double SeparableConv2d::cost(const BundleSpec& in) const {
  if (in.empty()) return 0;
  return depthwise_.cost(in) + pointwise_.cost({depthwise_.output_spec(in[0])});
}

BatchNorm::BatchNorm(std::string name, int64_t channels, double momentum, double eps)
    : UnaryLayer(std::move(name)),
      channels_(channels),
      momentum_(momentum),
      eps_(eps),
      sum_(channels, 0.0),
      sumsq_(channels, 0.0) {
  gamma = make_parameter(Tensor::full(Shape{channels}, 1.0));
  beta = make_parameter(Tensor::zeros(Shape{channels}));
  {
    MemoryCategoryGuard cat(MemoryCategory::kParameter);
    running_mean = Tensor::zeros(Shape{channels});
    running_var = Tensor::full(Shape{channels}, 1.0);
  }
  register_parameter("gamma", &gamma);
  register_parameter("beta", &beta);
  register_buffer("running_mean", &running_mean);
  register_buffer("running_var", &running_var);
}

Tensor BatchNorm::forward(const Tensor& x) {
  GPIPE_CHECK((x.rank() == 4 || x.rank() == 2) && x.size(1) == channels_, "BatchNorm '", name(),
              "': expected input [N, ", channels_, "(, H, W)], got ", x.shape());
  ops::BatchNormResult r =
      ops::batch_norm(x, gamma, beta, running_mean, running_var, training(), eps_);
  if (training() && !in_recomputation()) {
    // Record sums, fold them in once per step (Note [BatchNorm across micro-batches]).
    const int64_t n = x.numel() / channels_;
    const auto mean = r.mean.to_vector<double>(), var = r.var.to_vector<double>();
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t c = 0; c < channels_; ++c) {
      sum_[c] += mean[c] * n;
      sumsq_[c] += (var[c] + mean[c] * mean[c]) * n;
    }
    count_ += n;
  }
  return r.y;
}

void BatchNorm::finish_step() {
  std::lock_guard<std::mutex> lock(mu_);
  if (count_ >= 2) {
    std::vector<double> mean(channels_), var(channels_);
    for (int64_t c = 0; c < channels_; ++c) {
      mean[c] = sum_[c] / count_;
      var[c] = std::max(0.0, sumsq_[c] / count_ - mean[c] * mean[c]);
    }
    Tensor m = Tensor::from_vector<double>(mean, Shape{channels_})
                   .to(running_mean.dtype())
                   .to(running_mean.device());
    Tensor v = Tensor::from_vector<double>(var, Shape{channels_})
                   .to(running_var.dtype())
                   .to(running_var.device());
    ops::update_running_stats(running_mean, running_var, m, v, count_, momentum_);
  }
  std::fill(sum_.begin(), sum_.end(), 0.0);
  std::fill(sumsq_.begin(), sumsq_.end(), 0.0);
  count_ = 0;
}

void BatchNorm::discard_step() {
  std::lock_guard<std::mutex> lock(mu_);
  std::fill(sum_.begin(), sum_.end(), 0.0);
  std::fill(sumsq_.begin(), sumsq_.end(), 0.0);
  count_ = 0;
}

std::vector<double> BatchNorm::step_statistics() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<double> out(sum_);
  out.insert(out.end(), sumsq_.begin(), sumsq_.end());
  out.push_back(static_cast<double>(count_));
  return out;
}

void BatchNorm::set_step_statistics(const std::vector<double>& summed) {
  GPIPE_CHECK(summed.size() == static_cast<size_t>(2 * channels_ + 1), "BatchNorm '", name(),
              "': set_step_statistics expects ", 2 * channels_ + 1, " values, got ", summed.size());
  std::lock_guard<std::mutex> lock(mu_);
  std::copy(summed.begin(), summed.begin() + channels_, sum_.begin());
  std::copy(summed.begin() + channels_, summed.begin() + 2 * channels_, sumsq_.begin());
  count_ = static_cast<int64_t>(summed.back());
}

TensorSpec BatchNorm::output_spec(const TensorSpec& in) const {
  GPIPE_CHECK((in.shape.rank() == 4 || in.shape.rank() == 2) && in.shape[1] == channels_,
              "BatchNorm '", name(), "': expected input [N, ", channels_, "(, H, W)], got ",
              in.shape);
  return in;
}

double BatchNorm::cost(const BundleSpec& in) const {
  return in.empty() ? 0 : 6.0 * in[0].shape.numel();
}

Pool2d::Pool2d(std::string name, PoolKind kind, ops::Pool2dOptions opt)
    : UnaryLayer(std::move(name)), kind_(kind), opt_(opt) {}

Tensor Pool2d::forward(const Tensor& x) {
  return kind_ == PoolKind::kMax ? ops::max_pool2d(x, opt_) : ops::avg_pool2d(x, opt_);
}

TensorSpec Pool2d::output_spec(const TensorSpec& in) const {
  GPIPE_CHECK(in.shape.rank() == 4, "layer '", name(), "': expected input [N, C, H, W], got ",
              in.shape);
  return {Shape{in.shape[0], in.shape[1],
                window_out(name(), in.shape[2], opt_.kernel[0], opt_.stride[0], opt_.padding[0]),
                window_out(name(), in.shape[3], opt_.kernel[1], opt_.stride[1], opt_.padding[1])},
          in.dtype};
}

double Pool2d::cost(const BundleSpec& in) const {
  if (in.empty()) return 0;
  return static_cast<double>(output_spec(in[0]).shape.numel()) * opt_.kernel[0] * opt_.kernel[1];
}

Tensor GlobalAvgPool::forward(const Tensor& x) { return ops::global_avg_pool2d(x); }

TensorSpec GlobalAvgPool::output_spec(const TensorSpec& in) const {
  GPIPE_CHECK(in.shape.rank() == 4, "layer '", name(), "': expected input [N, C, H, W], got ",
              in.shape);
  return {Shape{in.shape[0], in.shape[1]}, in.dtype};
}

}  // namespace gpipe
