#include "models/unet.h"

#include <memory>

#include "core/error.h"
#include "layers/conv.h"
#include "ops/ops.h"

namespace gpipe::models {
namespace {

void check_config(const UNetConfig& c) {
  GPIPE_CHECK(c.depth >= 1 && c.depth <= 12, "unet: depth B must be in [1, 12], got ", c.depth);
  GPIPE_CHECK(c.base_channels >= 2 && c.base_channels % 2 == 0,
              "unet: base channels C must be even and >= 2, got ", c.base_channels);
  GPIPE_CHECK(c.convs_per_block >= 1, "unet: convs per block must be >= 1, got ",
              c.convs_per_block);
  GPIPE_CHECK(c.in_channels >= 1, "unet: in_channels must be >= 1, got ", c.in_channels);
  GPIPE_CHECK(c.num_classes >= 1, "unet: num_classes must be >= 1, got ", c.num_classes);
}

struct Channels {
  int64_t in, mid, out;
};

int64_t level(const UNetConfig& c, int64_t i) {  // C 2^i, for i >= -1
  return i < 0 ? c.base_channels / 2 : c.base_channels << i;
}
Channels encoder_channels(const UNetConfig& c, int64_t i) {
  return {i == 0 ? c.in_channels : level(c, i - 1), level(c, i), level(c, i)};
}
Channels bottleneck_channels(const UNetConfig& c) {
  return {level(c, c.depth - 1), level(c, c.depth), level(c, c.depth - 1)};
}
Channels decoder_channels(const UNetConfig& c, int64_t i) {
  return {level(c, i + 1), level(c, i - 1), level(c, i - 1)};
}

int64_t stack_parameters(const Channels& ch, int64_t n) {
  auto unit = [](int64_t in, int64_t out) { return in * out * 9 + 2 * out; };
  if (n == 1) return unit(ch.in, ch.out);
  return unit(ch.in, ch.mid) + (n - 2) * unit(ch.mid, ch.mid) + unit(ch.mid, ch.out);
}

// A U-Net layer: its conv stack's units are its sublayers.
class Block : public Layer {
 public:
  using Layer::Layer;
  void add(const std::string& name, Layer* l) { register_sublayer(name, l); }
};

// The stack of conv units of one block, as sublayers of `owner`.
class ConvStack {
 public:
  ConvStack(Block& owner, const std::string& prefix, const Channels& ch, int64_t n, uint64_t seed) {
    for (int64_t k = 0; k < n; ++k) {
      const int64_t in = k == 0 ? ch.in : ch.mid, out = k == n - 1 ? ch.out : ch.mid;
      const std::string id = std::to_string(k + 1);
      convs_.push_back(std::make_unique<Conv2d>(prefix + "conv" + id, in, out,
                                                std::array<int64_t, 2>{3, 3}, seed + 17 * k,
                                                ops::Conv2dOptions{.padding = {1, 1}}));
      bns_.push_back(std::make_unique<BatchNorm>(prefix + "bn" + id, out));
      owner.add("conv" + id, convs_.back().get());
      owner.add("bn" + id, bns_.back().get());
    }
  }
  Tensor forward(Tensor x) {
    for (size_t k = 0; k < convs_.size(); ++k) x = ops::relu((*bns_[k])((*convs_[k])(x)));
    return x;
  }
  TensorSpec output_spec(TensorSpec s) const {
    for (size_t k = 0; k < convs_.size(); ++k) s = bns_[k]->output_spec(convs_[k]->output_spec(s));
    return s;
  }
  double cost(TensorSpec s) const {
    double flops = 0;
    for (size_t k = 0; k < convs_.size(); ++k) {
      flops += convs_[k]->cost({s});
      s = convs_[k]->output_spec(s);
      flops += bns_[k]->cost({s}) + static_cast<double>(s.shape.numel());  // + ReLU
    }
    return flops;
  }

 private:
  std::vector<std::unique_ptr<Conv2d>> convs_;
  std::vector<std::unique_ptr<BatchNorm>> bns_;
};

TensorSpec expect_image(const Layer& l, const BundleSpec& in, int64_t channels, int64_t multiple) {
  l.expect_inputs(in, 1);
  const TensorSpec& s = in[0];
  GPIPE_CHECK(s.shape.rank() == 4 && s.shape[1] == channels && is_floating(s.dtype), "layer '",
              l.name(), "': expected a float [N, ", channels, ", H, W] input, got ", s.shape, " ",
              s.dtype);
  GPIPE_CHECK(s.shape[2] % multiple == 0 && s.shape[3] % multiple == 0, "layer '", l.name(),
              "': height and width must be multiples of ", multiple, ", got ", s.shape[2], "x",
              s.shape[3]);
  return s;
}

class Encoder final : public Block {
 public:
  Encoder(const UNetConfig& c, int64_t i)
      : Block("encoder_" + std::to_string(i)),
        ch_(encoder_channels(c, i)),
        multiple_(int64_t{1} << (c.depth - i)),
        stack_(*this, name() + ".", ch_, c.convs_per_block, c.seed + 1000 * (i + 1)) {
    set_skip_namespace("level_" + std::to_string(i));
    declare_stash("skip");
  }
  Bundle forward(const Bundle& in) override {
    expect_image(*this, spec_of(in), ch_.in, multiple_);
    Tensor y = stack_.forward(in[0]);
    stash("skip", y);
    return {ops::max_pool2d(y, {})};
  }
  BundleSpec output_spec(const BundleSpec& in) const override {
    TensorSpec s = stack_.output_spec(expect_image(*this, in, ch_.in, multiple_));
    stash_spec("skip", s);
    s.shape = Shape({s.shape[0], s.shape[1], s.shape[2] / 2, s.shape[3] / 2});
    return {s};
  }
  double cost(const BundleSpec& in) const override {
    return stack_.cost(in[0]) + static_cast<double>(stack_.output_spec(in[0]).shape.numel());
  }

 private:
  Channels ch_;
  int64_t multiple_;
  ConvStack stack_;
};

class Bottleneck final : public Block {
 public:
  explicit Bottleneck(const UNetConfig& c)
      : Block("bottleneck"),
        ch_(bottleneck_channels(c)),
        stack_(*this, name() + ".", ch_, c.convs_per_block, c.seed + 500) {}
  Bundle forward(const Bundle& in) override {
    expect_image(*this, spec_of(in), ch_.in, 1);
    return {stack_.forward(in[0])};
  }
  BundleSpec output_spec(const BundleSpec& in) const override {
    return {stack_.output_spec(expect_image(*this, in, ch_.in, 1))};
  }
  double cost(const BundleSpec& in) const override { return stack_.cost(in[0]); }

 private:
  Channels ch_;
  ConvStack stack_;
};

// Nearest-neighbour 2x upsampling: [N, C, H, W] -> [N, C, 2H, 2W].
Tensor upsample2x(const Tensor& x) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  Tensor y = ops::reshape(x, {n, c, h, 1, w, 1});
  y = ops::expand(y, Shape({n, c, h, 2, w, 2}));
  return ops::reshape(y, {n, c, 2 * h, 2 * w});
}

class Decoder final : public Block {
 public:
  Decoder(const UNetConfig& c, int64_t i)
      : Block("decoder_" + std::to_string(i)),
        ch_(decoder_channels(c, i)),
        stack_(*this, name() + ".", ch_, c.convs_per_block, c.seed + 2000 * (i + 1)) {
    set_skip_namespace("level_" + std::to_string(i));
    declare_pop("skip");
  }
  Bundle forward(const Bundle& in) override {
    const Tensor skip = pop("skip");
    check_skip(spec_of(in), TensorSpec{skip.shape(), skip.dtype()});
    return {stack_.forward(ops::concat({upsample2x(in[0]), skip}, 1))};
  }
  BundleSpec output_spec(const BundleSpec& in) const override {
    return {stack_.output_spec(joined(in, pop_spec("skip")))};
  }
  double cost(const BundleSpec& in) const override {
    const TensorSpec j = joined(in, pop_spec("skip"));
    return stack_.cost(j) + static_cast<double>(j.shape.numel());
  }

 private:
  // The upsampled input and the skip, concatenated on channels.
  TensorSpec joined(const BundleSpec& in, const TensorSpec& skip) const {
    check_skip(in, skip);
    TensorSpec s = in[0];
    s.shape = Shape({s.shape[0], ch_.in, s.shape[2] * 2, s.shape[3] * 2});
    return s;
  }
  void check_skip(const BundleSpec& in, const TensorSpec& skip) const {
    expect_inputs(in, 1);
    const Shape& x = in[0].shape;
    GPIPE_CHECK(x.rank() == 4 && is_floating(in[0].dtype), "layer '", name(),
                "': expected a float [N, C, H, W] input, got ", x, " ", in[0].dtype);
    const Shape& s = skip.shape;
    GPIPE_CHECK(s.rank() == 4 && s[0] == x[0] && s[2] == 2 * x[2] && s[3] == 2 * x[3] &&
                    x[1] + s[1] == ch_.in,
                "layer '", name(), "': its input ", x, " upsampled and the popped skip ", s,
                " do not make [N, ", ch_.in, ", 2H, 2W]");
  }
  Channels ch_;
  ConvStack stack_;
};

class Segment final : public Block {
 public:
  explicit Segment(const UNetConfig& c)
      : Block("segment"),
        in_(level(c, -1)),
        conv_("segment.conv", in_, c.num_classes, {1, 1}, c.seed + 9) {
    add("conv", &conv_);
  }
  Bundle forward(const Bundle& in) override {
    expect_image(*this, spec_of(in), in_, 1);
    return {ops::permute(conv_(in[0]), {0, 2, 3, 1})};
  }
  BundleSpec output_spec(const BundleSpec& in) const override {
    const TensorSpec s = conv_.output_spec(expect_image(*this, in, in_, 1));
    return {TensorSpec{Shape({s.shape[0], s.shape[2], s.shape[3], s.shape[1]}), s.dtype}};
  }
  double cost(const BundleSpec& in) const override { return conv_.cost(in); }

 private:
  int64_t in_;
  Conv2d conv_;
};

}  // namespace

int64_t unet_parameter_count(const UNetConfig& c) {
  check_config(c);
  int64_t n = 0;
  for (int64_t i = 0; i < c.depth; ++i)
    n += stack_parameters(encoder_channels(c, i), c.convs_per_block) +
         stack_parameters(decoder_channels(c, i), c.convs_per_block);
  n += stack_parameters(bottleneck_channels(c), c.convs_per_block);
  return n + level(c, -1) * c.num_classes;
}

int64_t unet_layer_count(const UNetConfig& c) {
  check_config(c);
  return 2 * c.depth + 2;
}

Model unet(const UNetConfig& c) {
  check_config(c);
  Model m;
  for (int64_t i = 0; i < c.depth; ++i) m.layers.push_back(std::make_shared<Encoder>(c, i));
  m.layers.push_back(std::make_shared<Bottleneck>(c));
  for (int64_t i = c.depth - 1; i >= 0; --i) m.layers.push_back(std::make_shared<Decoder>(c, i));
  m.layers.push_back(std::make_shared<Segment>(c));
  m.loss = std::make_shared<CrossEntropyLoss>();
  return m;
}

}  // namespace gpipe::models
