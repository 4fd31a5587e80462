// AmoebaNet-D as a flat list of layers: a stem, one Layer per cell, a
// classifier. A cell owns its ops as registered sublayers (so parameters get
// names like "cell_3.node_2.op_a.conv1.weight" and every BatchNorm receives
// finish_step), wires them as the genotype tables say (amoebanet_genotype.h), and computes its
// cost by walking the same wiring over shapes (output_spec) instead of data.
// The builder and the parameter count share one channel plan (plan_cells), so
// the count is exact without allocating anything.
#include "models/amoebanet.h"

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "layers/conv.h"
#include "models/amoebanet_genotype.h"
#include "ops/ops.h"

namespace gpipe::models {
namespace {

// --- building blocks ------------------------------------------------------------

// Distinct, reproducible seeds for the convolutions in construction order.
class SeedSequence {
 public:
  explicit SeedSequence(uint64_t base) : base_(base) {}
  uint64_t next() { return mix_key(base_, ++count_); }

 private:
  uint64_t base_, count_ = 0;
};

struct RcbStep {
  int64_t cin, cout;
  std::array<int64_t, 2> kernel{1, 1}, stride{1, 1}, padding{0, 0};
};

// ReLU -> Conv2d -> BatchNorm, repeated: sublayers conv1, bn1, conv2, bn2, ...
class ReluConvBn final : public UnaryLayer {
 public:
  ReluConvBn(std::string name, const std::vector<RcbStep>& steps, SeedSequence& seeds)
      : UnaryLayer(std::move(name)) {
    for (size_t i = 0; i < steps.size(); ++i) {
      const RcbStep& s = steps[i];
      const std::string n = std::to_string(i + 1);
      convs_.push_back(
          std::make_unique<Conv2d>("conv" + n, s.cin, s.cout, s.kernel, seeds.next(),
                                   ops::Conv2dOptions{.stride = s.stride, .padding = s.padding}));
      bns_.push_back(std::make_unique<BatchNorm>("bn" + n, s.cout));
      register_sublayer("conv" + n, convs_.back().get());
      register_sublayer("bn" + n, bns_.back().get());
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = x;
    for (size_t i = 0; i < convs_.size(); ++i) y = (*bns_[i])((*convs_[i])(ops::relu(y)));
    return y;
  }
  TensorSpec output_spec(const TensorSpec& in) const override {
    TensorSpec s = in;
    for (size_t i = 0; i < convs_.size(); ++i) s = bns_[i]->output_spec(convs_[i]->output_spec(s));
    return s;
  }
  double cost(const BundleSpec& in) const override {
    if (in.empty()) return 0;
    TensorSpec s = in[0];
    double flops = 0;
    for (size_t i = 0; i < convs_.size(); ++i) {
      flops += convs_[i]->cost({s});
      s = convs_[i]->output_spec(s);
      flops += bns_[i]->cost({s});
    }
    return flops;
  }

 private:
  std::vector<std::unique_ptr<Conv2d>> convs_;
  std::vector<std::unique_ptr<BatchNorm>> bns_;
};

// (ReLU -> depthwise kxk (stride s on the first, dilation d) -> pointwise
// 1x1 -> BatchNorm), twice: sublayers dw1, pw1, bn1, dw2, pw2, bn2.
class SeparableStack final : public UnaryLayer {
 public:
  SeparableStack(std::string name, int64_t ch, int64_t k, int64_t s, int64_t d, SeedSequence& seeds)
      : UnaryLayer(std::move(name)) {
    for (int i = 0; i < 2; ++i) {
      const std::string n = std::to_string(i + 1);
      const int64_t stride = i == 0 ? s : 1, pad = d * (k - 1) / 2;
      dw_.push_back(std::make_unique<Conv2d>("dw" + n, ch, ch, std::array<int64_t, 2>{k, k},
                                             seeds.next(),
                                             ops::Conv2dOptions{.stride = {stride, stride},
                                                                .padding = {pad, pad},
                                                                .dilation = {d, d},
                                                                .groups = ch}));
      pw_.push_back(
          std::make_unique<Conv2d>("pw" + n, ch, ch, std::array<int64_t, 2>{1, 1}, seeds.next()));
      bns_.push_back(std::make_unique<BatchNorm>("bn" + n, ch));
      register_sublayer("dw" + n, dw_.back().get());
      register_sublayer("pw" + n, pw_.back().get());
      register_sublayer("bn" + n, bns_.back().get());
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = x;
    for (size_t i = 0; i < dw_.size(); ++i) y = (*bns_[i])((*pw_[i])((*dw_[i])(ops::relu(y))));
    return y;
  }
  TensorSpec output_spec(const TensorSpec& in) const override {
    TensorSpec s = in;
    for (size_t i = 0; i < dw_.size(); ++i)
      s = bns_[i]->output_spec(pw_[i]->output_spec(dw_[i]->output_spec(s)));
    return s;
  }
  double cost(const BundleSpec& in) const override {
    if (in.empty()) return 0;
    TensorSpec s = in[0];
    double flops = 0;
    for (size_t i = 0; i < dw_.size(); ++i) {
      flops += dw_[i]->cost({s});
      s = dw_[i]->output_spec(s);
      flops += pw_[i]->cost({s}) + bns_[i]->cost({s});
    }
    return flops;
  }

 private:
  std::vector<std::unique_ptr<Conv2d>> dw_, pw_;
  std::vector<std::unique_ptr<BatchNorm>> bns_;
};

std::unique_ptr<ReluConvBn> rcb_1x1(std::string name, int64_t cin, int64_t cout,
                                    SeedSequence& seeds) {
  return std::make_unique<ReluConvBn>(std::move(name), std::vector<RcbStep>{{cin, cout}}, seeds);
}

// ReLU, then [conv1(x), conv2(shift(x))] concatenated along channels, then BN.
// Both convs are 1x1 with stride 2, so each output has ceil(H/2) x ceil(W/2).
class FactorizedReduce final : public UnaryLayer {
 public:
  FactorizedReduce(std::string name, int64_t cin, int64_t cout, SeedSequence& seeds)
      : UnaryLayer(std::move(name)),
        conv1_("conv1", cin, cout / 2, {1, 1}, seeds.next(), ops::Conv2dOptions{.stride = {2, 2}}),
        conv2_("conv2", cin, cout / 2, {1, 1}, seeds.next(), ops::Conv2dOptions{.stride = {2, 2}}),
        bn_("bn", cout) {
    register_sublayer("conv1", &conv1_);
    register_sublayer("conv2", &conv2_);
    register_sublayer("bn", &bn_);
  }
  Tensor forward(const Tensor& in) override {
    const Tensor x = ops::relu(in);
    return bn_(ops::concat({conv1_(x), conv2_(shift(x))}, 1));
  }
  TensorSpec output_spec(const TensorSpec& in) const override {
    TensorSpec half = conv1_.output_spec(in);
    half.shape[1] *= 2;
    return bn_.output_spec(half);
  }
  double cost(const BundleSpec& in) const override {
    if (in.empty()) return 0;
    return conv1_.cost(in) + conv2_.cost(in) + bn_.cost({output_spec(in[0])});
  }

 private:
  // x[:, :, 1:, 1:] zero-padded by one row at the bottom and one column at the
  // right. A 1x1 stride-2 conv reads rows 0, 2, 4, ... of it, so the padded row
  // is read only when H is odd (likewise W): pad only then, which saves two
  // copies per call on the even sizes AmoebaNet sees and gives the same result.
  static Tensor shift(const Tensor& x) {
    const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    Tensor s = ops::slice(ops::slice(x, 2, 1, h), 3, 1, w);
    if (h % 2 == 1)
      s = ops::concat({s, Tensor::zeros(Shape{n, c, 1, w - 1}, x.dtype(), x.device())}, 2);
    if (w % 2 == 1)
      s = ops::concat({s, Tensor::zeros(Shape{n, c, s.size(2), 1}, x.dtype(), x.device())}, 3);
    return s;
  }

  Conv2d conv1_, conv2_;
  BatchNorm bn_;
};

class Identity final : public UnaryLayer {
 public:
  using UnaryLayer::UnaryLayer;
  Tensor forward(const Tensor& x) override { return x; }
  TensorSpec output_spec(const TensorSpec& in) const override { return in; }
  double cost(const BundleSpec&) const override { return 0.0; }
};

std::unique_ptr<UnaryLayer> pool(std::string name, PoolKind kind, int64_t k, int64_t s,
                                 int64_t pad) {
  return std::make_unique<Pool2d>(
      std::move(name), kind,
      ops::Pool2dOptions{
          .kernel = {k, k}, .stride = {s, s}, .padding = {pad, pad}, .count_include_pad = false});
}

std::unique_ptr<UnaryLayer> make_op(std::string name, OpKind op, int64_t ch, int64_t s,
                                    bool maxpool_quirk, SeedSequence& seeds) {
  const int64_t q = ch / 4;
  switch (op) {
    case OpKind::kConv1x1:
      return std::make_unique<ReluConvBn>(std::move(name),
                                          std::vector<RcbStep>{{ch, ch, {1, 1}, {s, s}}}, seeds);
    case OpKind::kConv3x3:
      return std::make_unique<ReluConvBn>(
          std::move(name), std::vector<RcbStep>{{ch, q}, {q, q, {3, 3}, {s, s}, {1, 1}}, {q, ch}},
          seeds);
    case OpKind::kConv1x7_7x1:
      return std::make_unique<ReluConvBn>(
          std::move(name),
          std::vector<RcbStep>{
              {ch, q}, {q, q, {1, 7}, {1, s}, {0, 3}}, {q, q, {7, 1}, {s, 1}, {3, 0}}, {q, ch}},
          seeds);
    case OpKind::kAvgPool3x3:
      return pool(std::move(name), PoolKind::kAvg, 3, s, 1);
    case OpKind::kMaxPool3x3:
      return pool(std::move(name), maxpool_quirk ? PoolKind::kAvg : PoolKind::kMax, 3, s, 1);
    case OpKind::kMaxPool2x2:
      return pool(std::move(name), PoolKind::kMax, 2, s, 0);
    case OpKind::kNone:
      if (s == 1) return std::make_unique<Identity>(std::move(name));
      return std::make_unique<FactorizedReduce>(std::move(name), ch, ch, seeds);
    case OpKind::kSep3x3x2:
      return std::make_unique<SeparableStack>(std::move(name), ch, 3, s, 1, seeds);
    case OpKind::kDilSep5x5x2:
      return std::make_unique<SeparableStack>(std::move(name), ch, 5, s, 2, seeds);
  }
  GPIPE_ASSERT(false, "unknown AmoebaNet op");
  return nullptr;
}

// node = op_a(input_a) + op_b(input_b); as a Layer: (input_a, input_b) -> (node).
class Node final : public Layer {
 public:
  Node(std::string name, std::unique_ptr<UnaryLayer> a, std::unique_ptr<UnaryLayer> b)
      : Layer(std::move(name)), a_(std::move(a)), b_(std::move(b)) {
    register_sublayer("op_a", a_.get());
    register_sublayer("op_b", b_.get());
  }
  Tensor combine(const Tensor& xa, const Tensor& xb) { return ops::add((*a_)(xa), (*b_)(xb)); }
  Bundle forward(const Bundle& in) override {
    expect_inputs(spec_of(in), 2);
    return {combine(in[0], in[1])};
  }
  BundleSpec output_spec(const BundleSpec& in) const override {
    expect_inputs(in, 2);
    const TensorSpec sa = a_->output_spec(in[0]), sb = b_->output_spec(in[1]);
    GPIPE_CHECK(sa == sb, "layer '", name(), "': op_a gives ", sa.shape, " but op_b gives ",
                sb.shape);
    return {sa};
  }
  double cost(const BundleSpec& in) const override {
    return a_->cost({in[0]}) + b_->cost({in[1]}) +
           static_cast<double>(output_spec(in)[0].shape.numel());
  }

 private:
  std::unique_ptr<UnaryLayer> a_, b_;
};

// --- the list's layers ----------------------------------------------------------

int64_t ceil_half(int64_t n) { return (n + 1) / 2; }

void expect_nchw(const std::string& who, const char* what, const TensorSpec& s, int64_t channels) {
  GPIPE_CHECK(s.shape.rank() == 4 && s.shape[1] == channels && is_floating(s.dtype), "layer '", who,
              "': expected ", what, " [N, ", channels, ", H, W] float, got ", s.dtype, s.shape);
}

// ReLU -> Conv2d(in -> c, 3x3, stride 2 (1 with small_input), pad 1) -> BatchNorm;
// (x) -> (s, s).
class Stem final : public Layer {
 public:
  Stem(const AmoebaNetConfig& c, int64_t channels, SeedSequence& seeds)
      : Layer("stem"),
        in_channels_(c.in_channels),
        small_input_(c.small_input),
        conv_("conv", c.in_channels, channels, {3, 3}, seeds.next(),
              ops::Conv2dOptions{.stride = {c.small_input ? 1 : 2, c.small_input ? 1 : 2},
                                 .padding = {1, 1}}),
        bn_("bn", channels) {
    register_sublayer("conv", &conv_);
    register_sublayer("bn", &bn_);
  }
  Bundle forward(const Bundle& in) override {
    check(spec_of(in));
    Tensor s = bn_(conv_(ops::relu(in[0])));
    return {s, s};
  }
  BundleSpec output_spec(const BundleSpec& in) const override {
    check(in);
    const TensorSpec s = bn_.output_spec(conv_.output_spec(in[0]));
    return {s, s};
  }
  double cost(const BundleSpec& in) const override {
    check(in);
    return conv_.cost(in) + bn_.cost({conv_.output_spec(in[0])});
  }

 private:
  void check(const BundleSpec& in) const {
    expect_inputs(in, 1);
    expect_nchw(name(), "images", in[0], in_channels_);
    const int64_t h = in[0].shape[2], w = in[0].shape[3];
    GPIPE_CHECK(!small_input_ || (h % 4 == 0 && w % 4 == 0 && h > 0 && w > 0), "layer '", name(),
                "': input size ", h, "x", w,
                " does not fit the two reduction cells of the small-input layout (H and W must be "
                "multiples of 4, e.g. 28x28 or 32x32), got ",
                in[0].shape);
    GPIPE_CHECK(small_input_ || (ceil_half(h) % 16 == 0 && ceil_half(w) % 16 == 0), "layer '",
                name(), "': input size ", h, "x", w,
                " does not fit the four reduction cells (ceil(H/2) and ceil(W/2) must be multiples "
                "of 16, e.g. "
                "32x32 or 224x224; pad 28x28 images to 32x32), got ",
                in[0].shape);
  }

  int64_t in_channels_;
  bool small_input_;
  Conv2d conv_;
  BatchNorm bn_;
};

// (prev, prev_prev) -> (concat of the genotype's states, prev).
class Cell final : public Layer {
 public:
  Cell(int64_t index, const CellPlan& p, bool maxpool_quirk, SeedSequence& seeds)
      : Layer("cell_" + std::to_string(index)), plan_(p), genes_(p.genes()) {
    pre0_ = rcb_1x1("preprocess0", p.c_p, p.c, seeds);
    register_sublayer("preprocess0", pre0_.get());
    if (p.reduction_prev)
      pre1_ = std::make_unique<FactorizedReduce>("preprocess1", p.c_pp, p.c, seeds);
    else if (p.c_pp != p.c)
      pre1_ = rcb_1x1("preprocess1", p.c_pp, p.c, seeds);
    if (pre1_) register_sublayer("preprocess1", pre1_.get());
    for (size_t k = 0; k < genes_.nodes.size(); ++k) {
      const NodeGenes& g = genes_.nodes[k];
      auto op = [&](const char* which, const Gene& gene) {
        return make_op(which, gene.op, p.c, op_stride(p.reduction, gene), maxpool_quirk, seeds);
      };
      nodes_.push_back(std::make_unique<Node>("node_" + std::to_string(k + 2), op("op_a", g.a),
                                              op("op_b", g.b)));
      register_sublayer(nodes_.back()->name(), nodes_.back().get());
    }
  }

  Bundle forward(const Bundle& in) override {
    check(spec_of(in));
    std::vector<Tensor> states{(*pre0_)(in[0]), pre1_ ? (*pre1_)(in[1]) : in[1]};
    for (size_t k = 0; k < nodes_.size(); ++k)
      states.push_back(
          nodes_[k]->combine(states[genes_.nodes[k].a.input], states[genes_.nodes[k].b.input]));
    std::vector<Tensor> out;
    for (int i : genes_.concat) out.push_back(states[i]);
    return {ops::concat(out, 1), in[0]};
  }

  BundleSpec output_spec(const BundleSpec& in) const override {
    TensorSpec out = walk(in, nullptr)[genes_.concat[0]];
    out.shape[1] = plan_.c * static_cast<int64_t>(genes_.concat.size());
    return {out, in[0]};
  }

  // The ops' costs over the states' shapes, plus one add per node element.
  double cost(const BundleSpec& in) const override {
    double flops = 0;
    walk(in, &flops);
    return flops;
  }

 private:
  void check(const BundleSpec& in) const {
    expect_inputs(in, 2);
    expect_nchw(name(), "prev", in[0], plan_.c_p);
    expect_nchw(name(), "prev_prev", in[1], plan_.c_pp);
    const Shape &p = in[0].shape, &pp = in[1].shape;
    const bool fits = plan_.reduction_prev ? ceil_half(pp[2]) == p[2] && ceil_half(pp[3]) == p[3]
                                           : pp[2] == p[2] && pp[3] == p[3];
    GPIPE_CHECK(p[0] == pp[0] && fits, "layer '", name(), "': prev ", p, " and prev_prev ", pp,
                " do not match (",
                plan_.reduction_prev ? "prev_prev must have twice prev's height and width"
                                     : "same height and width",
                ", same batch)");
    GPIPE_CHECK(!plan_.reduction || (p[2] % 2 == 0 && p[3] % 2 == 0), "layer '", name(),
                "': a reduction cell needs an even height and width, got prev ", p,
                " (inputs must have ceil(H/2) and ceil(W/2) multiples of 16, e.g. 32x32)");
  }

  // Specs of all 7 states for inputs `in`; adds the FLOPs to *flops if given.
  std::vector<TensorSpec> walk(const BundleSpec& in, double* flops) const {
    check(in);
    std::vector<TensorSpec> states{pre0_->output_spec(in[0]),
                                   pre1_ ? pre1_->output_spec(in[1]) : in[1]};
    if (flops) *flops += pre0_->cost({in[0]}) + (pre1_ ? pre1_->cost({in[1]}) : 0.0);
    for (size_t k = 0; k < nodes_.size(); ++k) {
      const BundleSpec args{states[genes_.nodes[k].a.input], states[genes_.nodes[k].b.input]};
      states.push_back(nodes_[k]->output_spec(args)[0]);
      if (flops) *flops += nodes_[k]->cost(args);
    }
    return states;
  }

  CellPlan plan_;
  const Genotype& genes_;
  std::unique_ptr<UnaryLayer> pre0_, pre1_;  // no pre1_: prev_prev is state 1 as it is
  std::vector<std::unique_ptr<Node>> nodes_;
};

// Global average pooling, then Linear; (prev, prev_prev) -> (logits).
class Classifier final : public Layer {
 public:
  Classifier(int64_t channels, int64_t classes, SeedSequence& seeds)
      : Layer("classifier"),
        channels_(channels),
        pool_("pool"),
        fc_("fc", channels, classes, seeds.next()) {
    register_sublayer("pool", &pool_);
    register_sublayer("fc", &fc_);
  }
  Bundle forward(const Bundle& in) override {
    check(spec_of(in));
    return {fc_(pool_(in[0]))};
  }
  BundleSpec output_spec(const BundleSpec& in) const override {
    check(in);
    return {fc_.output_spec(pool_.output_spec(in[0]))};
  }
  double cost(const BundleSpec& in) const override {
    check(in);
    return pool_.cost({in[0]}) + fc_.cost({pool_.output_spec(in[0])});
  }

 private:
  void check(const BundleSpec& in) const {
    expect_inputs(in, 2);
    expect_nchw(name(), "prev", in[0], channels_);
  }

  int64_t channels_;
  GlobalAvgPool pool_;
  Linear fc_;
};

}  // namespace

int64_t amoebanet_parameter_count(const AmoebaNetConfig& c) {
  const NetPlan p = plan_cells(c);
  int64_t n = rcb_params(c.in_channels, p.stem_channels, 9);
  for (const CellPlan& cell : p.cells) n += cell_params(cell);
  return n + p.out_channels * c.num_classes + c.num_classes;
}

int64_t amoebanet_layer_count(const AmoebaNetConfig& c) {
  return 3 * c.num_normal_cells + (c.small_input ? 4 : 6);
}

Model amoebanet_d(const AmoebaNetConfig& config) {
  AmoebaNetConfig c = config;
  c.genotype = AmoebaNetGenotype::kD;
  return amoebanet(c);
}

Model amoebanet_b(const AmoebaNetConfig& config) {
  AmoebaNetConfig c = config;
  c.genotype = AmoebaNetGenotype::kB;
  return amoebanet(c);
}

Model amoebanet(const AmoebaNetConfig& c) {
  const NetPlan p = plan_cells(c);
  SeedSequence seeds(c.seed);
  Model m;
  m.layers.push_back(std::make_shared<Stem>(c, p.stem_channels, seeds));
  for (size_t i = 0; i < p.cells.size(); ++i)
    m.layers.push_back(std::make_shared<Cell>(static_cast<int64_t>(i), p.cells[i],
                                              c.torchgpipe_maxpool_quirk, seeds));
  m.layers.push_back(std::make_shared<Classifier>(p.out_channels, c.num_classes, seeds));
  m.loss = std::make_shared<CrossEntropyLoss>();
  return m;
}

}  // namespace gpipe::models
