#include "data/fashion_mnist.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <set>

#include "tests/test_util.h"

using namespace gpipe;
using Catch::Matchers::Contains;

namespace {

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string idx_images(uint32_t count, uint32_t rows, uint32_t cols, size_t payload) {
  return be32(0x0803) + be32(count) + be32(rows) + be32(cols) + std::string(payload, '\x7f');
}

std::string idx_labels(uint32_t count, size_t payload) {
  return be32(0x0801) + be32(count) + std::string(payload, '\x03');
}

// A dataset whose label is its row index, to check which rows a batch holds.
ImageDataset indexed_dataset(int64_t n) {
  ImageDataset ds;
  ds.images = Tensor::zeros(Shape{n, 1, 28, 28});
  std::vector<int64_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), int64_t{0});
  ds.labels = Tensor::from_vector(ids, Shape{n});
  return ds;
}

}  // namespace

TEST_CASE("Fashion-MNIST: the first 100 real training examples", "[data][fashion_mnist]") {
  ImageDataset ds = load_fashion_mnist(kFashionMnistDir, /*train=*/true, {.limit = 100});
  REQUIRE(ds.images.shape() == Shape{100, 1, 28, 28});
  REQUIRE(ds.images.dtype() == DType::kFloat32);
  REQUIRE(ds.labels.shape() == Shape{100});
  REQUIRE(ds.labels.dtype() == DType::kInt64);
  std::vector<int64_t> labels = ds.labels.to_vector<int64_t>();
  CHECK(std::vector<int64_t>(labels.begin(), labels.begin() + 6) ==
        std::vector<int64_t>{9, 0, 0, 3, 0, 2});
  CHECK(std::set<int64_t>(labels.begin(), labels.end()).size() == 10);  // all classes appear
  for (int64_t l : labels) CHECK((l >= 0 && l < 10));
  std::vector<float> px = ds.images.to_vector<float>();
  CHECK(*std::min_element(px.begin(), px.end()) == 0.0f);
  CHECK(*std::max_element(px.begin(), px.end()) == 1.0f);
  // Pixel sum of the first image, 76247 / 255 (computed with Python's gzip).
  CHECK(std::accumulate(px.begin(), px.begin() + 784, 0.0) ==
        Approx(76247.0 / 255.0).epsilon(1e-5));
}

TEST_CASE("Fashion-MNIST: a pipeline stage reads only its part", "[data][fashion_mnist]") {
  const ImageDataset both = load_fashion_mnist(kFashionMnistDir, /*train=*/true, {.limit = 50});
  const ImageDataset images =
      load_fashion_mnist(kFashionMnistDir, true, {.limit = 50, .labels = false});
  const ImageDataset labels =
      load_fashion_mnist(kFashionMnistDir, true, {.limit = 50, .images = false});
  const ImageDataset neither =
      load_fashion_mnist(kFashionMnistDir, true, {.images = false, .labels = false});
  CHECK_FALSE(images.labels.defined());
  CHECK(images.images.to_vector<float>() == both.images.to_vector<float>());
  CHECK_FALSE(labels.images.defined());
  CHECK(labels.labels.to_vector<int64_t>() == both.labels.to_vector<int64_t>());
  CHECK(images.size() == 50);
  CHECK(labels.size() == 50);
  CHECK_FALSE(neither.images.defined());
  CHECK_FALSE(neither.labels.defined());
  CHECK(neither.size() == 60000);
}

TEST_CASE("Fashion-MNIST: the whole test set, normalised", "[data][fashion_mnist]") {
  ImageDataset ds = load_fashion_mnist(kFashionMnistDir, /*train=*/false, {.normalize = true});
  REQUIRE(ds.size() == 10000);
  REQUIRE(ds.images.shape() == Shape{10000, 1, 28, 28});
  CHECK(ds.labels.at({0}) == 9);
  std::vector<float> px = ds.images.to_vector<float>();
  const double lo = -kFashionMnistMean / kFashionMnistStd,
               hi = (1 - kFashionMnistMean) / kFashionMnistStd;
  CHECK(*std::min_element(px.begin(), px.end()) == Approx(lo));
  CHECK(*std::max_element(px.begin(), px.end()) == Approx(hi));
  const double mean = std::accumulate(px.begin(), px.end(), 0.0) / static_cast<double>(px.size());
  CHECK(std::abs(mean) < 0.05);  // the test set is distributed like the training set
}

TEST_CASE("Fashion-MNIST: missing, mislabelled, truncated and mismatched files",
          "[data][fashion_mnist]") {
  const std::string dir = testing::scratch_dir("fmnist_bad");
  const std::string images = dir + "/train-images-idx3-ubyte.gz";
  const std::string labels = dir + "/train-labels-idx1-ubyte.gz";

  SECTION("missing") {
    CHECK_THROWS_WITH(load_fashion_mnist(dir, true),
                      Contains(images) && Contains("no such file") && Contains("2051"));
  }
  SECTION("wrong magic: a labels file where the images belong") {
    testing::write_gz(images, idx_labels(2, 2));
    CHECK_THROWS_WITH(load_fashion_mnist(dir, true),
                      Contains(images + ": expected IDX magic 2051 (images), got 2049 (labels)"));
  }
  SECTION("truncated payload") {
    testing::write_gz(images, idx_images(3, 28, 28, 2 * 784 + 10));
    testing::write_gz(labels, idx_labels(3, 3));
    CHECK_THROWS_WITH(load_fashion_mnist(dir, true),
                      Contains(images + ": truncated") && Contains("expected 2352 bytes"));
    // A limit inside the data that is there reads fine.
    CHECK(load_fashion_mnist(dir, true, {.limit = 2}).size() == 2);
  }
  SECTION("truncated header") {
    testing::write_gz(images, be32(0x0803) + be32(3) + std::string(2, '\0'));
    CHECK_THROWS_WITH(load_fashion_mnist(dir, true), Contains(images + ": truncated"));
  }
  SECTION("gzip stream cut short") {
    testing::write_gz(images, idx_images(40, 28, 28, 40 * 784));
    std::string gz = testing::read_file(images);
    testing::write_file(images, gz.substr(0, gz.size() / 2));
    testing::write_gz(labels, idx_labels(40, 40));
    CHECK_THROWS_WITH(load_fashion_mnist(dir, true), Contains(images) && Contains("truncated"));
  }
  SECTION("wrong geometry") {
    testing::write_gz(images, idx_images(1, 32, 32, 32 * 32));
    testing::write_gz(labels, idx_labels(1, 1));
    CHECK_THROWS_WITH(load_fashion_mnist(dir, true), Contains(images) && Contains("[N, 28, 28]"));
  }
  SECTION("count mismatch") {
    testing::write_gz(images, idx_images(3, 28, 28, 3 * 784));
    testing::write_gz(labels, idx_labels(2, 2));
    CHECK_THROWS_WITH(load_fashion_mnist(dir, true),
                      Contains("3 images") && Contains(labels) && Contains("2 labels"));
  }
  SECTION("label out of range") {
    testing::write_gz(images, idx_images(1, 28, 28, 784));
    testing::write_gz(labels, be32(0x0801) + be32(1) + "\x0c");
    CHECK_THROWS_WITH(load_fashion_mnist(dir, true), Contains(labels) && Contains("label 12"));
  }
}

TEST_CASE("ImageBatcher: fixed shapes, every row once per epoch, deterministic shuffles",
          "[data][fashion_mnist]") {
  ImageBatcher batcher(indexed_dataset(23), {.batch_size = 5, .seed = 7});
  REQUIRE(batcher.batches_per_epoch() == 4);  // drop_last: 20 of 23 rows per epoch
  std::vector<std::vector<int64_t>> epochs(2);
  for (int e = 0; e < 2; ++e) {
    for (int i = 0; i < 4; ++i) {
      CHECK(batcher.epoch() == e);
      Batch b = batcher.next();
      REQUIRE(b.inputs.size() == 1);
      REQUIRE(b.targets.size() == 1);
      CHECK(b.inputs[0].shape() == Shape{5, 1, 28, 28});
      CHECK(b.targets[0].shape() == Shape{5});
      for (int64_t id : b.targets[0].to_vector<int64_t>()) epochs[e].push_back(id);
    }
    std::set<int64_t> unique(epochs[e].begin(), epochs[e].end());
    CHECK(unique.size() == 20);
  }
  CHECK(epochs[0] != epochs[1]);  // reshuffled

  ImageBatcher again(indexed_dataset(23), {.batch_size = 5, .seed = 7});
  std::vector<int64_t> first;
  for (int i = 0; i < 4; ++i)
    for (int64_t id : again.next().targets[0].to_vector<int64_t>()) first.push_back(id);
  CHECK(first == epochs[0]);

  ImageBatcher in_order(indexed_dataset(7),
                        {.batch_size = 3, .shuffle = false, .drop_last = false});
  CHECK(in_order.batches_per_epoch() == 3);
  in_order.next();
  in_order.next();
  CHECK(in_order.next().targets[0].to_vector<int64_t>() == std::vector<int64_t>{6});
  CHECK(in_order.epoch() == 1);
}

TEST_CASE("image_batch_producer stops after the requested epochs", "[data][fashion_mnist]") {
  ImageBatcher batcher(indexed_dataset(10), {.batch_size = 4});
  BatchProducer produce = image_batch_producer(batcher, /*epochs=*/2);
  int count = 0;
  while (produce()) ++count;
  CHECK(count == 4);
  CHECK_THROWS_WITH(ImageBatcher(indexed_dataset(3), {.batch_size = 4}), Contains("no batch of 4"));
}
