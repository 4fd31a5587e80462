// The image models on the user's images (--data=DIR): a folder of class
// folders (PNG / JPEG, decoded by the prefetch thread as batches are made)
// or CIFAR-10 / CIFAR-100 binary batches. Images are fitted to
// --image-size (shorter side scaled, centre cropped), given the data's
// channel count (1 if every sampled image is gray, else 3) and normalised
// per channel with --mean / --std or the training images' own statistics.
// The model's input channels and classes follow the data. --augment mirrors
// half the images and shifts each by up to --image-size / 8 pixels (a crop
// of the image padded by as much), a function of (seed, step, row). U-Net
// trains on --masks (data/image_folder.h), its classes the masks' largest
// id + 1 unless --classes.
#include <algorithm>
#include <sstream>

#include "core/allocator.h"
#include "data/cifar.h"
#include "data/image_set.h"
#include "data/metrics.h"
#include "tools/train/image_eval.h"
#include "tools/train/task.h"

namespace gpipe::train {
namespace {

constexpr int64_t kTrainCacheBytes = int64_t{256} << 20;  // fitted training images kept
constexpr int64_t kEvalCacheBytes = int64_t{64} << 20;

void usage(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

class ImageDataTask final : public Task {
 public:
  explicit ImageDataTask(const TrainConfig& c) : c_(c) {
    usage(c.data.size() == 1, detail::concat("--data: the image models take one folder, got ",
                                             c.data.size(), " paths"));
    dir_ = c.data[0];
    require_directory(dir_, "--data");
    std::shared_ptr<const ImageSource> train, val;
    if (is_cifar_folder(dir_)) {
      usage(c.val_data.empty(), "--val-data: a CIFAR folder holds its own test split");
      usage(c.masks.empty(), "--masks: CIFAR has no masks (expected a folder of class folders)");
      const CifarSplits s = load_cifar(dir_, c.cifar_labels == "fine");
      kind_ = s.kind;
      classes_ = s.classes;
      train = s.train;
      val = s.test;
    } else {
      usage(c.masks.empty() || c.val_data.empty(),
            "--masks and --val-data: masks are read for --data only; hold out a --val-fraction");
      ImageFolderListing all = list_image_folder(dir_, "--data");
      kind_ = "image folder";
      classes_ = static_cast<int64_t>(all.classes.size());
      ImageFolderListing held;
      if (!c.val_data.empty())
        held = list_image_folder(c.val_data, "--val-data", all.classes);
      else
        std::tie(all, held) = split_listing(all, c.val_fraction);
      train = std::make_shared<ImageFolderSource>(std::move(all), c.masks);
      val = std::make_shared<ImageFolderSource>(std::move(held), c.masks);
    }
    if (segmentation()) {
      usage(train->has_masks(), "--model=unet on --data: expected --masks=DIR, the label masks");
      classes_ = c.classes > 0 ? c.classes : mask_classes(*train);
    }
    const ImageNormalization norm = normalization(*train);
    c_.data_channels = norm.channels;
    c_.data_classes = classes_;
    train_ =
        std::make_unique<ImageSet>(train, ImageSetOptions{c.image_size, norm, kTrainCacheBytes});
    val_ = std::make_unique<ImageSet>(val, ImageSetOptions{c.image_size, norm, kEvalCacheBytes});
    rows_ = std::make_unique<StepRows>(train_size(), c.batch, data_seed(c));
  }

  void apply_data_shape(TrainConfig& c) const override {
    c.data_channels = c_.data_channels;
    c.data_classes = c_.data_classes;
  }

  std::string describe() const override {
    const ImageNormalization& n = norm_;
    std::ostringstream os;
    os << kind_ << " " << dir_ << ": " << train_size() << " training, " << val_->size()
       << (c_.val_data.empty() && kind_ == "image folder" ? " held-out" : " validation")
       << " images, " << classes_ << " classes; " << n.channels << "x" << c_.image_size << "x"
       << c_.image_size << ", mean " << list(n.mean) << " std " << list(n.std)
       << (c_.pixel_mean.empty() ? detail::concat(" (measured on ", measured_, " images)") : "")
       << (c_.augment ? ", random flips and shifts" : "") << "; " << model_title(c_) << "; "
       << rows_->batches_per_epoch() << " batches of " << c_.batch << " per epoch";
    return os.str();
  }

  Model make_model() const override { return train::make_model(c_); }
  int64_t train_size() const override { return train_->size(); }
  bool counts_tokens() const override { return false; }

  Batch batch_at(int64_t step) const override {
    const std::vector<int64_t> rows = rows_->rows(step);
    std::vector<ImagePlacement> place;
    if (c_.augment)
      for (size_t i = 0; i < rows.size(); ++i)
        place.push_back(augment_placement(data_seed(c_), step, static_cast<int64_t>(i),
                                          std::max<int64_t>(1, c_.image_size / 8)));
    Batch b;
    if (c_.train_inputs) b.inputs = {train_->images(rows, place)};
    if (c_.train_targets)
      b.targets = {segmentation() ? train_->masks(rows, classes_, place) : train_->labels(rows)};
    return b;
  }

  EvalResult evaluate(Pipeline& pipe) const override {
    ImageEvalSpec spec;
    spec.examples = val_->size();
    spec.batch = [&](const std::vector<int64_t>& rows) {
      return std::pair{val_->images(rows),
                       segmentation() ? val_->masks(rows, classes_) : val_->labels(rows)};
    };
    if (segmentation())
      spec.overlap = [&](const Tensor& logits, const Tensor& labels, int64_t& inter, int64_t& uni) {
        count_overlap(logits, labels, inter, uni);
      };
    return evaluate_images(pipe, c_, spec);
  }

  std::map<std::string, std::string> metadata() const override {
    return {{"train.data", detail::concat(kind_, " ", dir_, " examples=", train_size(),
                                          " classes=", classes_, " channels=", norm_.channels,
                                          " image_size=", c_.image_size, " augment=", c_.augment,
                                          " mean=", list(norm_.mean), " std=", list(norm_.std))},
            {"train.model_config", model_title(c_)}};
  }

 private:
  const StepRows* step_rows() const override { return rows_.get(); }
  bool segmentation() const { return c_.model == "unet"; }

  ImageNormalization normalization(const ImageSource& train) {
    const bool mean = !c_.pixel_mean.empty(), sd = !c_.pixel_std.empty();
    usage(mean == sd, "--mean and --std: give both or neither (neither: measured on the data)");
    if (mean) {
      usage(c_.pixel_mean.size() == c_.pixel_std.size() &&
                (c_.pixel_mean.size() == 1 || c_.pixel_mean.size() == 3),
            detail::concat("--mean / --std: expected 1 or 3 values each (one per channel), got ",
                           c_.pixel_mean.size(), " and ", c_.pixel_std.size()));
      norm_ = {static_cast<int64_t>(c_.pixel_mean.size()), c_.pixel_mean, c_.pixel_std};
    } else {
      measured_ = std::min<int64_t>(train.size(), kStatsImages);
      norm_ = measure_normalization(train, c_.image_size, 0, kStatsImages);
    }
    return norm_;
  }

  static std::string list(const std::vector<double>& v) {
    std::ostringstream os;
    os.precision(4);
    for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
    return os.str();
  }

  // Pixels of a non-background class both predicted and labelled, and
  // pixels either predicts or labels as non-background (for two classes:
  // the foreground IoU).
  void count_overlap(const Tensor& logits, const Tensor& labels, int64_t& inter,
                     int64_t& uni) const {
    const std::vector<float> z = logits.to_vector<float>();
    const std::vector<int64_t> y = labels.to_vector<int64_t>();
    const int64_t k = classes_;  // logits [B, H, W, K]: channels last (models/unet.h)
    for (size_t i = 0; i < y.size(); ++i) {
      const float* pixel = z.data() + i * k;
      const int64_t best = std::max_element(pixel, pixel + k) - pixel;
      inter += best == y[i] && y[i] != 0;
      uni += best != 0 || y[i] != 0;
    }
  }

  static constexpr int64_t kStatsImages = 2000;

  TrainConfig c_;
  std::string dir_, kind_;
  int64_t classes_ = 0, measured_ = 0;
  ImageNormalization norm_;
  std::unique_ptr<ImageSet> train_, val_;
  std::unique_ptr<StepRows> rows_;
};

}  // namespace

std::unique_ptr<Task> make_image_data_task(const TrainConfig& c) {
  return std::make_unique<ImageDataTask>(c);
}

}  // namespace gpipe::train
