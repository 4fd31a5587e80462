#include "models/resnet.h"

#include <array>
#include <memory>
#include <optional>

#include "core/error.h"
#include "layers/basic.h"
#include "layers/conv.h"
#include "ops/ops.h"

namespace gpipe::models {
namespace {

std::array<int64_t, 4> blocks_per_group(int64_t depth) {
  if (depth == 50) return {3, 4, 6, 3};
  if (depth == 101) return {3, 4, 23, 3};
  if (depth == 152) return {3, 8, 36, 3};
  throw Error(detail::concat("resnet: depth must be 50, 101 or 152, got ", depth));
}

void check_config(const ResNetConfig& c) {
  blocks_per_group(c.depth);
  GPIPE_CHECK(c.width >= 1 && c.in_channels >= 1 && c.num_classes >= 1,
              "resnet: width, in_channels and num_classes must be >= 1, got ", c.width, ", ",
              c.in_channels, ", ", c.num_classes);
}

// One bottleneck's shape.
struct BlockShape {
  std::string name;
  int64_t in, planes, stride;
  bool project() const { return stride != 1 || in != 4 * planes; }
};

std::vector<BlockShape> block_shapes(const ResNetConfig& c) {
  std::vector<BlockShape> out;
  int64_t in = c.width;
  const auto counts = blocks_per_group(c.depth);
  for (int64_t g = 0; g < 4; ++g)
    for (int64_t b = 0; b < counts[static_cast<size_t>(g)]; ++b) {
      const int64_t planes = c.width << g;
      out.push_back({detail::concat("group", g, "_block", b), in, planes, g > 0 && b == 0 ? 2 : 1});
      in = 4 * planes;
    }
  return out;
}

// conv -> BatchNorm, registered as sublayers "<conv>" and "<bn>" of the owner.
struct ConvBn {
  Conv2d conv;
  BatchNorm bn;
  ConvBn(const std::string& prefix, const std::string& conv_name, const std::string& bn_name,
         int64_t in, int64_t out, int64_t kernel, int64_t stride, uint64_t seed)
      : conv(prefix + conv_name, in, out, {kernel, kernel}, seed,
             ops::Conv2dOptions{.stride = {stride, stride}, .padding = {kernel / 2, kernel / 2}}),
        bn(prefix + bn_name, out) {}
  Tensor operator()(const Tensor& x) { return bn(conv(x)); }
  TensorSpec spec(const TensorSpec& s) const { return bn.output_spec(conv.output_spec(s)); }
  double cost(const TensorSpec& s) const { return conv.cost({s}) + bn.cost({conv.output_spec(s)}); }
};

class Part : public Layer {
 public:
  using Layer::Layer;

 protected:
  void add(const std::string& conv, const std::string& bn, ConvBn& u) {
    register_sublayer(conv, &u.conv);
    register_sublayer(bn, &u.bn);
  }
  void expect(const BundleSpec& in, int64_t channels) const {
    expect_inputs(in, 1);
    GPIPE_CHECK(in[0].shape.rank() == 4 && in[0].shape[1] == channels && is_floating(in[0].dtype),
                "layer '", name(), "': expected a float [N, ", channels, ", H, W] input, got ",
                in[0].shape, " ", in[0].dtype);
  }
};

class Stem final : public Part {
 public:
  explicit Stem(const ResNetConfig& c)
      : Part("stem"),
        in_(c.in_channels),
        small_(c.small_input),
        unit_("stem.", "conv", "bn", c.in_channels, c.width, c.small_input ? 3 : 7,
              c.small_input ? 1 : 2, c.seed + 1) {
    add("conv", "bn", unit_);
  }
  Bundle forward(const Bundle& in) override {
    expect(spec_of(in), in_);
    Tensor y = ops::relu(unit_(in[0]));
    if (!small_) y = ops::max_pool2d(y, pool());
    return {y};
  }
  BundleSpec output_spec(const BundleSpec& in) const override {
    expect(in, in_);
    TensorSpec s = unit_.spec(in[0]);
    if (!small_)  // max-pool 3x3, stride 2, pad 1
      s.shape = Shape({s.shape[0], s.shape[1], (s.shape[2] - 1) / 2 + 1, (s.shape[3] - 1) / 2 + 1});
    return {s};
  }
  double cost(const BundleSpec& in) const override { return unit_.cost(in[0]); }

 private:
  static ops::Pool2dOptions pool() {
    return {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  }
  int64_t in_;
  bool small_;
  ConvBn unit_;
};

// The three parts of a bottleneck; `parts` says which this layer runs
// (all three: a whole block; one: a split block's a, b or c).
class BottleneckPart final : public Part {
 public:
  enum Which { kA = 1, kB = 2, kC = 4, kAll = 7 };
  BottleneckPart(const BlockShape& b, Which parts, bool zero_init, uint64_t seed)
      : Part(parts == kAll ? b.name
             : parts == kA ? b.name + "_a"
             : parts == kB ? b.name + "_b"
                           : b.name + "_c"),
        shape_(b),
        parts_(parts) {
    const std::string p = name() + ".";
    if (parts & kA) {
      a_.emplace(p, "conv1", "bn1", b.in, b.planes, 1, 1, seed + 1);
      add("conv1", "bn1", *a_);
    }
    if (parts & kB) {
      b_.emplace(p, "conv2", "bn2", b.planes, b.planes, 3, b.stride, seed + 2);
      add("conv2", "bn2", *b_);
    }
    if (parts & kC) {
      c_.emplace(p, "conv3", "bn3", b.planes, 4 * b.planes, 1, 1, seed + 3);
      if (zero_init) c_->bn.gamma = make_parameter(Tensor::zeros(Shape{4 * b.planes}));
      add("conv3", "bn3", *c_);
      if (b.project()) {
        down_.emplace(p, "downsample_conv", "downsample_bn", b.in, 4 * b.planes, 1, b.stride,
                      seed + 4);
        add("downsample_conv", "downsample_bn", *down_);
      }
    }
    if (parts != kAll) {
      set_skip_namespace(b.name);
      if (parts == kA) declare_stash("identity");
      if (parts == kC) declare_pop("identity");
    }
  }

  Bundle forward(const Bundle& in) override {
    expect(spec_of(in), in_channels());
    Tensor x = in[0], identity;
    if (parts_ == kAll) identity = x;
    if (parts_ == kA) stash("identity", x);
    if (a_) x = ops::relu((*a_)(x));
    if (b_) x = ops::relu((*b_)(x));
    if (c_) {
      if (parts_ == kC) identity = pop("identity");
      x = (*c_)(x);
      x = ops::relu(ops::add(x, down_ ? (*down_)(identity) : identity));
    }
    return {x};
  }
  BundleSpec output_spec(const BundleSpec& in) const override {
    expect(in, in_channels());
    TensorSpec s = in[0];
    if (parts_ == kA) stash_spec("identity", s);
    if (a_) s = a_->spec(s);
    if (b_) s = b_->spec(s);
    if (c_) {
      if (parts_ == kC) {
        const TensorSpec id = pop_spec("identity");
        GPIPE_CHECK(id.shape.rank() == 4 && id.shape[1] == shape_.in, "layer '", name(),
                    "': the popped shortcut is ", id.shape, ", expected [N, ", shape_.in,
                    ", H, W]");
      }
      s = c_->spec(s);
    }
    return {s};
  }
  double cost(const BundleSpec& in) const override {
    TensorSpec s = in[0];
    double flops = 0;
    if (a_) flops += a_->cost(s), s = a_->spec(s);
    if (b_) flops += b_->cost(s), s = b_->spec(s);
    if (c_) {
      flops += c_->cost(s);
      if (down_) {
        // The shortcut's input has the block's input shape: the stride's
        // output has the same spatial size as conv3's.
        const TensorSpec out = c_->spec(s);
        flops += static_cast<double>(out.shape.numel()) * static_cast<double>(shape_.in) * 2;
      }
      flops += 2.0 * static_cast<double>(c_->spec(s).shape.numel());
    }
    return flops;
  }

 private:
  int64_t in_channels() const { return parts_ & kA ? shape_.in : shape_.planes; }
  BlockShape shape_;
  Which parts_;
  std::optional<ConvBn> a_, b_, c_, down_;
};

class Head final : public Part {
 public:
  explicit Head(const ResNetConfig& c)
      : Part("head"), in_(32 * c.width), fc_("head.fc", in_, c.num_classes, c.seed + 7) {
    register_sublayer("fc", &fc_);
  }
  Bundle forward(const Bundle& in) override {
    expect(spec_of(in), in_);
    return {fc_(ops::global_avg_pool2d(in[0]))};
  }
  BundleSpec output_spec(const BundleSpec& in) const override {
    expect(in, in_);
    return {fc_.output_spec(TensorSpec{Shape({in[0].shape[0], in_}), in[0].dtype})};
  }
  double cost(const BundleSpec& in) const override {
    return static_cast<double>(in[0].shape.numel()) +
           fc_.cost({TensorSpec{Shape({in[0].shape[0], in_}), in[0].dtype}});
  }

 private:
  int64_t in_;
  Linear fc_;
};

}  // namespace

int64_t resnet_parameter_count(const ResNetConfig& c) {
  check_config(c);
  const int64_t k = c.small_input ? 3 : 7;
  int64_t n = c.in_channels * c.width * k * k + 2 * c.width;
  for (const BlockShape& b : block_shapes(c)) {
    n += b.in * b.planes + 2 * b.planes;
    n += b.planes * b.planes * 9 + 2 * b.planes;
    n += b.planes * 4 * b.planes + 8 * b.planes;
    if (b.project()) n += b.in * 4 * b.planes + 8 * b.planes;
  }
  return n + 32 * c.width * c.num_classes + c.num_classes;
}

int64_t resnet_layer_count(const ResNetConfig& c) {
  check_config(c);
  return 2 + static_cast<int64_t>(block_shapes(c).size()) * (c.split_blocks ? 3 : 1);
}

Model resnet(const ResNetConfig& c) {
  check_config(c);
  Model m;
  m.layers.push_back(std::make_shared<Stem>(c));
  uint64_t seed = c.seed + 100;
  for (const BlockShape& b : block_shapes(c)) {
    if (c.split_blocks) {
      for (auto part : {BottleneckPart::kA, BottleneckPart::kB, BottleneckPart::kC})
        m.layers.push_back(std::make_shared<BottleneckPart>(b, part, c.zero_init_residual, seed));
    } else {
      m.layers.push_back(
          std::make_shared<BottleneckPart>(b, BottleneckPart::kAll, c.zero_init_residual, seed));
    }
    seed += 10;
  }
  m.layers.push_back(std::make_shared<Head>(c));
  m.loss = std::make_shared<CrossEntropyLoss>();
  return m;
}

}  // namespace gpipe::models
