// The image models (AmoebaNet-D/-B, ResNet, U-Net) on Fashion-MNIST. Pixels are scaled to [0, 1] /
// std (the training set's pixel standard deviation; no mean subtraction, see the constructor), then
// padded from 28x28 to 32x32 with zeros (black, like the background): AmoebaNet's reductions need
// sides that halve evenly (see models/amoebanet.h). --image-size=28 (AmoebaNet's small-input stem)
// keeps the images at 28x28. With --augment each training image is mirrored left-right with
// probability 1/2 and shifted by up to 2 pixels each way on the canvas (a random crop of the image
// padded by 2 more than the canvas; pixels shifted past a 28x28 canvas's edge are dropped), the
// draws a function of (seed, step, row in batch).
#include <cstring>
#include <sstream>

#include "core/allocator.h"
#include "core/rng.h"
#include "data/fashion_mnist.h"
#include "data/metrics.h"
#include "tools/train/image_eval.h"
#include "tools/train/task.h"

namespace gpipe::train {
namespace {

constexpr int64_t kSide = 28;    // Fashion-MNIST's images
constexpr int64_t kCanvas = 32;  // what they are padded to, unless --image-size=28
constexpr int64_t kShift = 2;    // --augment: the most pixels an image moves each way

class ImageTask final : public Task {
 public:
  explicit ImageTask(const TrainConfig& c)
      : c_(c), dir_(c.data_dir.empty() ? kFashionMnistDir : c.data_dir) {
    require_directory(dir_, "--data-dir");
    // x / std, without subtracting the mean: the stem starts with a ReLU
    // (models/amoebanet.h), which would zero every pixel darker than the mean.
    FashionMnistOptions train_opt;
    train_opt.normalize = true;
    train_opt.mean = 0.0;
    if (c.train_limit > 0) train_opt.limit = c.train_limit;
    FashionMnistOptions test_opt = train_opt;
    test_opt.limit = -1;
    // Training data: only the part this process's stage consumes (U-Net's
    // targets are made from the images).
    train_opt.images = c.train_inputs || (c.model == "unet" && c.train_targets);
    train_opt.labels = c.train_targets && c.model != "unet";
    train_ = load_fashion_mnist(dir_, /*train=*/true, train_opt);
    test_ = load_fashion_mnist(dir_, /*train=*/false, test_opt);
    rows_ = std::make_unique<StepRows>(train_.size(), c.batch, data_seed(c));
  }

  std::string describe() const override {
    std::ostringstream os;
    os << "Fashion-MNIST from " << dir_ << ": " << train_.size() << " training, " << test_.size()
       << " test images, scaled by 1/std"
       << (canvas() == kSide ? ", 28x28" : ", zero-padded 28x28 -> 32x32")
       << (c_.image_size > kCanvas
               ? detail::concat(", upsampled to ", c_.image_size, "x", c_.image_size)
               : "")
       << (c_.augment ? ", random flips and shifts" : "")
       << (segmentation() ? "; targets: per-pixel foreground masks (intensity >= 0.5)" : "") << "; "
       << model_title(c_) << "; " << rows_->batches_per_epoch() << " batches of " << c_.batch
       << " per epoch";
    return os.str();
  }

  Model make_model() const override { return train::make_model(c_); }
  int64_t train_size() const override { return train_.size(); }
  bool counts_tokens() const override { return false; }

  Batch batch_at(int64_t step) const override {
    MemoryCategoryGuard cat(MemoryCategory::kWorkspace);
    const std::vector<int64_t> rows = rows_->rows(step);
    std::vector<Placement> place(rows.size());
    if (c_.augment)
      for (size_t i = 0; i < rows.size(); ++i) {
        const uint64_t coin =
            mix_key(mix_key(data_seed(c_) ^ 0xf11b, static_cast<uint64_t>(step)), i);
        place[i] = {static_cast<bool>(coin & 1),
                    static_cast<int64_t>((coin >> 8) % (2 * kShift + 1)) - kShift,
                    static_cast<int64_t>((coin >> 16) % (2 * kShift + 1)) - kShift};
      }
    Batch b;
    if (segmentation()) {
      // The targets are made from the placed images: both ends need them.
      if (!train_.images.defined()) return b;  // a stage in between: neither
      const Tensor x = padded(gather_rows(train_.images, rows), place);
      if (c_.train_inputs) b.inputs = {x};
      if (c_.train_targets) b.targets = {foreground(x)};
      return b;
    }
    if (train_.images.defined()) b.inputs = {padded(gather_rows(train_.images, rows), place)};
    if (train_.labels.defined()) b.targets = {gather_rows(train_.labels, rows)};
    return b;
  }

  EvalResult evaluate(Pipeline& pipe) const override {
    ImageEvalSpec spec;
    spec.examples = test_.size();
    spec.workspace = true;
    spec.batch = [&](const std::vector<int64_t>& rows) {
      const Tensor x = padded(gather_rows(test_.images, rows), std::vector<Placement>(rows.size()));
      return std::pair{x, segmentation() ? foreground(x) : gather_rows(test_.labels, rows)};
    };
    if (segmentation()) spec.overlap = count_overlap;
    return evaluate_images(pipe, c_, spec);
  }

  std::map<std::string, std::string> metadata() const override {
    return {{"train.data",
             detail::concat("fashion-mnist train_limit=", c_.train_limit, " augment=", c_.augment,
                            " image_size=", c_.image_size,
                            label_smoothing_of(c_) > 0
                                ? detail::concat(" label_smoothing=", label_smoothing_of(c_))
                                : "")},
            {"train.model_config", model_title(c_)}};
  }

 private:
  const StepRows* step_rows() const override { return rows_.get(); }

  // How an image is placed on the canvas: moved down and right by (dy, dx)
  // pixels from the centre, and whether it is mirrored left-right.
  struct Placement {
    bool flip = false;
    int64_t dy = 0, dx = 0;
  };

  // 28 (--image-size=28) or 32: the side of the zero canvas the images go on.
  int64_t canvas() const { return c_.image_size == kSide ? kSide : kCanvas; }

  // [B, 1, 28, 28] -> [B, 1, S, S], S = --image-size: placed on a zero
  // canvas (28x28 or 32x32), then, for S > 32, each pixel repeated S/32 times
  // in both directions (nearest-neighbour upsampling).
  Tensor padded(const Tensor& images, const std::vector<Placement>& place) const {
    const int64_t b = images.size(0), side = images.size(2), canvas_side = canvas();
    const int64_t scale = c_.image_size / canvas_side, out_side = canvas_side * scale;
    const int64_t margin = (canvas_side - side) / 2;  // of a centred image
    GPIPE_ASSERT(side == kSide && c_.image_size % canvas_side == 0);
    Tensor out = Tensor::zeros(Shape{b, 1, out_side, out_side});
    const Tensor in = images.contiguous();
    const float* src = in.data<float>();
    float* dst = out.data<float>();
    for (int64_t i = 0; i < b; ++i)
      for (int64_t y = 0; y < side; ++y) {
        const int64_t cy = y + margin + place[i].dy;  // the canvas row
        if (cy < 0 || cy >= canvas_side) continue;
        const float* in_row = src + (i * side + y) * side;
        float* out_row = dst + (i * out_side + cy * scale) * out_side;
        for (int64_t x = 0; x < side; ++x) {
          const int64_t cx = x + margin + place[i].dx;
          if (cx < 0 || cx >= canvas_side) continue;
          const float v = in_row[place[i].flip ? side - 1 - x : x];
          for (int64_t r = 0; r < scale; ++r) out_row[cx * scale + r] = v;
        }
        for (int64_t r = 1; r < scale; ++r)
          std::memcpy(out_row + r * out_side, out_row, sizeof(float) * out_side);
      }
    return out;
  }

  bool segmentation() const { return c_.model == "unet"; }

  // Per-pixel labels [B, S, S] (int64): 1 where the image's raw intensity
  // is at least kForeground (the canvas holds intensity / std), else 0.
  static Tensor foreground(const Tensor& canvas) {
    const Tensor x = canvas.contiguous();
    const float* v = x.data<float>();
    const int64_t b = x.size(0), h = x.size(2), w = x.size(3);
    Tensor out = Tensor::zeros(Shape{b, h, w}, DType::kInt64);
    int64_t* dst = out.data<int64_t>();
    const float threshold = static_cast<float>(kForeground / kFashionMnistStd);
    for (int64_t i = 0; i < b * h * w; ++i) dst[i] = v[i] >= threshold ? 1 : 0;
    return out;
  }
  static constexpr double kForeground = 0.5;

  // Adds the foreground pixels both predicted and labelled, and either.
  static void count_overlap(const Tensor& logits, const Tensor& labels, int64_t& inter,
                            int64_t& uni) {
    const std::vector<float> z = logits.to_vector<float>();
    const std::vector<int64_t> y = labels.to_vector<int64_t>();
    for (size_t i = 0; i < y.size(); ++i) {
      const bool predicted = z[2 * i + 1] > z[2 * i], labelled = y[i] == 1;
      inter += predicted && labelled;
      uni += predicted || labelled;
    }
  }

  TrainConfig c_;
  std::string dir_;
  ImageDataset train_, test_;
  std::unique_ptr<StepRows> rows_;
};

}  // namespace

std::unique_ptr<Task> make_image_task(const TrainConfig& c) {
  if (!c.data.empty()) return make_image_data_task(c);
  return std::make_unique<ImageTask>(c);
}

}  // namespace gpipe::train
