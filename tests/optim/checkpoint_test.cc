// Checkpoints: a resumed run continues the exact trajectory; tied weights;
// named errors for wrong shapes, missing and unexpected tensors.
#include "optim/checkpoint.h"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>

#include "core/autograd.h"
#include "core/tensor.h"
#include "layers/layer.h"  // make_parameter
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "optim/adam.h"
#include "optim/lr_schedule.h"
#include "optim/rmsprop.h"
#include "optim/safetensors.h"
#include "optim/sgd.h"
#include "runtime/communicator.h"
#include "tests/test_util.h"

namespace gpipe::optim {
namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

// A tiny model: a float32 matrix, a float64 vector, an embedding tied
// between two owners, and a buffer that is not trained.
struct TinyModel {
  Tensor w, b, emb, running;
  explicit TinyModel(uint64_t seed, Device device = kCpu) {
    w = make_parameter(Tensor::randn(Shape{3, 2}, seed).to(device));
    b = make_parameter(Tensor::randn(Shape{2}, seed + 1, 1.0, DType::kFloat64).to(device));
    emb = make_parameter(Tensor::randn(Shape{2, 2}, seed + 2).to(device));
    running = Tensor::zeros(Shape{2}, DType::kFloat32, device);
  }
  std::vector<NamedTensor> parameters() {
    return {{"w", &w}, {"b", &b}, {"enc.emb", &emb}, {"dec.emb", &emb}};
  }
  std::vector<NamedTensor> tensors() {
    auto t = parameters();
    t.push_back({"bn.running_mean", &running});
    return t;
  }
};

// sum((p - 0.1 * s)^2): a quadratic whose minimum moves with the step.
Tensor quadratic(const Tensor& p, int64_t s) {
  const Tensor d =
      ops::sub(p, Tensor::full(p.shape(), 0.1 * static_cast<double>(s), p.dtype(), p.device()));
  return ops::sum(ops::mul(d, d));
}

// One training step s (1-based): b only gets a gradient on even steps.
void train_step(TinyModel& m, Optimizer& opt, const LrSchedule& schedule, int64_t s) {
  opt.zero_grad();
  std::vector<Tensor> losses = {quadratic(m.w, s), quadratic(m.emb, s), quadratic(m.emb, s + 1)};
  if (s % 2 == 0) losses.push_back(quadratic(m.b, s));
  backward(losses);
  opt.set_lr(schedule.lr_at(s));
  opt.step();
  m.running.fill(0.5 * static_cast<double>(s));
}

// Every byte of every model tensor and optimizer state tensor.
std::vector<std::string> snapshot(TinyModel& m, const Optimizer& opt) {
  std::vector<std::string> out;
  auto add = [&](const Tensor& t) {
    const Tensor c = t.contiguous();
    out.emplace_back(static_cast<const char*>(c.raw_data()), c.nbytes());
  };
  for (const NamedTensor& nt : m.tensors()) add(*nt.tensor);
  for (const NamedTensor& nt : opt.state()) add(*nt.tensor);
  return out;
}

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(TinyModel&)>;

void check_resume_is_exact(const MakeOptimizer& make, const std::string& dir) {
  auto schedule = parse_lr_schedule("cosine:warmup=2,total=8,floor=0.001", 0.05);
  // Reference: six uninterrupted steps.
  TinyModel ref(1);
  auto ref_opt = make(ref);
  for (int64_t s = 1; s <= 6; ++s) train_step(ref, *ref_opt, *schedule, s);

  // Three steps, save; a differently initialised model loads and does three more.
  TinyModel first(1);
  auto first_opt = make(first);
  for (int64_t s = 1; s <= 3; ++s) train_step(first, *first_opt, *schedule, s);
  const std::string path = dir + "/" + first_opt->name() + ".safetensors";
  save_checkpoint(path, first.tensors(), *first_opt, 3, {{"run", "test"}});

  TinyModel resumed(99);
  auto resumed_opt = make(resumed);
  int64_t step = -1;
  load_checkpoint(path, resumed.tensors(), resumed_opt.get(), &step);
  CHECK(step == 3);
  CHECK(resumed_opt->step_count() == 3);
  CHECK(resumed_opt->lr() == first_opt->lr());
  CHECK(snapshot(resumed, *resumed_opt) == snapshot(first, *first_opt));
  for (int64_t s = step + 1; s <= 6; ++s) train_step(resumed, *resumed_opt, *schedule, s);
  CHECK(snapshot(resumed, *resumed_opt) == snapshot(ref, *ref_opt));
  CHECK(resumed.w.to_vector<float>() == ref.w.to_vector<float>());
}

TEST_CASE("A resumed run continues the exact trajectory, for every optimizer") {
  const std::string dir = testing::scratch_dir("checkpoint_resume");
  SECTION("Adam") {
    check_resume_is_exact(
        [](TinyModel& m) {
          return std::make_unique<Adam>(m.parameters(), AdamOptions{.weight_decay = 0.01});
        },
        dir);
  }
  SECTION("AdamW") {
    check_resume_is_exact(
        [](TinyModel& m) {
          return std::make_unique<AdamW>(m.parameters(), AdamOptions{.weight_decay = 0.1});
        },
        dir);
  }
  SECTION("SGD") {
    check_resume_is_exact(
        [](TinyModel& m) {
          return std::make_unique<Sgd>(
              m.parameters(), SgdOptions{.momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
        },
        dir);
  }
  SECTION("RMSProp") {
    check_resume_is_exact(
        [](TinyModel& m) {
          return std::make_unique<RmsProp>(m.parameters(),
                                           RmsPropOptions{.momentum = 0.5, .centered = true});
        },
        dir);
  }
}

TEST_CASE("Checkpoint layout: tied tensors once, optimizer state under optim/, metadata") {
  const std::string dir = testing::scratch_dir("checkpoint_layout");
  TinyModel m(1);
  Adam opt(m.parameters(), {.lr = 0.002, .beta2 = 0.99});
  save_checkpoint(dir + "/c.safetensors", m.tensors(), opt, 7, {{"run", "abc"}});
  const SafetensorsFile f = load_safetensors(dir + "/c.safetensors");
  std::vector<std::string> names;
  for (const auto& [n, t] : f.tensors) names.push_back(n);
  CHECK(names == std::vector<std::string>{"b", "bn.running_mean", "enc.emb", "optim/b.exp_avg",
                                          "optim/b.exp_avg_sq", "optim/b.step",
                                          "optim/enc.emb.exp_avg", "optim/enc.emb.exp_avg_sq",
                                          "optim/enc.emb.step", "optim/w.exp_avg",
                                          "optim/w.exp_avg_sq", "optim/w.step", "w"});
  CHECK(f.tensors.at("optim/w.step").dtype() == DType::kInt64);
  CHECK(f.metadata.at("gpipe.step") == "7");
  CHECK(f.metadata.at("gpipe.format") == "checkpoint/1");
  CHECK(f.metadata.at("optim.name") == "Adam");
  CHECK(f.metadata.at("optim.lr") == "0.002");
  CHECK(f.metadata.at("optim.beta2") == "0.99");
  CHECK(f.metadata.at("optim.step_count") == "0");
  CHECK(f.metadata.at("run") == "abc");

  // Tied weights come back into every alias (one TensorImpl), in place.
  TinyModel other(5);
  Tensor* emb_before = &other.emb;
  TensorImpl* impl_before = other.emb.impl_ptr().get();
  load_checkpoint(dir + "/c.safetensors", other.tensors(), nullptr, nullptr);
  CHECK(other.emb.impl_ptr().get() == impl_before);
  CHECK(emb_before->to_vector<float>() == m.emb.to_vector<float>());
  CHECK(other.b.to_vector<double>() == m.b.to_vector<double>());

  CHECK_THROWS_WITH(
      save_checkpoint(dir + "/d.safetensors", m.tensors(), opt, 1, {{"optim.lr", "1"}}),
      Contains("metadata key 'optim.lr' uses a reserved prefix"));
  CHECK_FALSE(fs::exists(dir + "/d.safetensors"));
}

TEST_CASE("Loading restores tensors on other CPU devices in place") {
  const std::string dir = testing::scratch_dir("checkpoint_devices");
  TinyModel src(1);
  save_checkpoint(dir + "/c.safetensors", src.tensors(), 0);
  const Device dev{DeviceType::kCPU, 2};
  TinyModel dst(2, dev);
  load_checkpoint(dir + "/c.safetensors", dst.tensors(), nullptr, nullptr);
  CHECK(dst.w.device() == dev);
  CHECK(dst.w.to_vector<float>() == src.w.to_vector<float>());
}

TEST_CASE("Checkpoint errors name the file and every problem; the model is untouched") {
  const std::string dir = testing::scratch_dir("checkpoint_errors");
  const std::string path = dir + "/x.safetensors";
  TinyModel m(1);
  Adam opt(m.parameters());
  save_checkpoint(path, m.tensors(), opt, 3);

  TinyModel target(2);
  const std::vector<float> w_before = target.w.to_vector<float>();

  Tensor wide = Tensor::zeros(Shape{4, 2});
  auto tensors = target.tensors();
  tensors[0].tensor = &wide;
  CHECK_THROWS_WITH(
      load_checkpoint(path, tensors, nullptr, nullptr),
      Contains("checkpoint " + path + ": tensor 'w' has shape [3, 2], the model expects [4, 2]"));

  Tensor wrong_dtype = Tensor::zeros(Shape{3, 2}, DType::kFloat64);
  tensors[0].tensor = &wrong_dtype;
  CHECK_THROWS_WITH(load_checkpoint(path, tensors, nullptr, nullptr),
                    Contains("tensor 'w' has dtype float32, the model expects float64"));

  Tensor extra = Tensor::zeros(Shape{1});
  tensors = target.tensors();
  tensors.push_back({"decoder.extra", &extra});
  CHECK_THROWS_WITH(load_checkpoint(path, tensors, nullptr, nullptr),
                    Contains("checkpoint " + path + ": missing tensor 'decoder.extra'"));

  tensors = target.tensors();
  tensors.erase(tensors.begin() + 1);  // no "b"
  CHECK_THROWS_WITH(load_checkpoint(path, tensors, nullptr, nullptr),
                    Contains("unexpected tensor 'b'"));
  load_checkpoint(path, tensors, nullptr, nullptr, {.allow_unexpected = true});
  CHECK(target.w.to_vector<float>() == m.w.to_vector<float>());

  // Several problems at once, and nothing is written.
  TinyModel fresh(3);
  const std::vector<float> fresh_w = fresh.w.to_vector<float>();
  tensors = fresh.tensors();
  tensors.erase(tensors.begin() + 1);
  tensors.push_back({"decoder.extra", &extra});
  try {
    load_checkpoint(path, tensors, nullptr, nullptr);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Contains("missing tensor 'decoder.extra'; unexpected tensor 'b'"));
  }
  CHECK(fresh.w.to_vector<float>() == fresh_w);

  // Optimizer mismatches.
  Sgd sgd(fresh.parameters(), {.momentum = 0.9});
  CHECK_THROWS_WITH(load_checkpoint(path, fresh.tensors(), &sgd, nullptr),
                    Contains("its optimizer state is Adam's, the optimizer is SGD"));
  const std::string bare = dir + "/bare.safetensors";
  save_checkpoint(bare, m.tensors(), 3);
  Adam adam(fresh.parameters());
  CHECK_THROWS_WITH(load_checkpoint(bare, fresh.tensors(), &adam, nullptr),
                    Contains("it has no optimizer state (saved without an optimizer)"));
  // Without an optimizer the optim/ tensors are not "unexpected".
  int64_t step = 0;
  load_checkpoint(path, fresh.tensors(), nullptr, &step);
  CHECK(step == 3);
  CHECK(fresh.w.to_vector<float>() == m.w.to_vector<float>());
  // File-level problems come from load_safetensors.
  CHECK_THROWS_WITH(load_checkpoint(dir + "/nope.safetensors", fresh.tensors(), nullptr, nullptr),
                    Contains("no such file"));
}

}  // namespace
}  // namespace gpipe::optim

namespace gpipe::optim {
namespace {

// A one-member Communicator: enough for save_sharded_checkpoint's protocol
// on one rank (the multi-rank protocol runs in tests/mpi).
class SoloCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int world_rank() const override { return 0; }
  int local_size() const override { return 1; }
  void allreduce(double*, int64_t, ReduceOp, const char*) override {}
  void allreduce(float*, int64_t, ReduceOp, const char*) override {}
  void broadcast(std::string&, int, const char*) override {}
  std::vector<std::string> allgather(const std::string& mine, const char*) override {
    return {mine};
  }
  void barrier(const char*) override {}
  std::shared_ptr<Communicator> split(int, int) override {
    return std::make_shared<SoloCommunicator>();
  }
  std::unique_ptr<Transport> transport(int, int, Device, std::string) override { return nullptr; }
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

TEST_CASE("A sharded checkpoint is a manifest over whole shards; any layout reads it") {
  const std::string dir = testing::scratch_dir("checkpoint_sharded");
  const std::string path = dir + "/ck.safetensors";
  TinyModel m(7);
  Sgd opt(m.parameters(), {.lr = 0.1, .momentum = 0.9});
  for (auto& p : m.parameters())
    p.tensor->set_grad(Tensor::full(p.tensor->shape(), 0.5, p.tensor->dtype()));
  opt.step();
  SoloCommunicator world;
  save_sharded_checkpoint(world, {.writer = true, .shard = 0, .shards = 1}, path, m.tensors(), opt,
                          3, {{"note", "x"}});
  const SafetensorsFile manifest = load_safetensors(path);
  CHECK(manifest.tensors.empty());
  CHECK(manifest.metadata.at("gpipe.format") == "checkpoint-manifest/1");
  const std::string first = manifest.metadata.at("gpipe.shards");
  CHECK_THAT(first, Catch::Matchers::StartsWith("ck.safetensors.step3-") &&
                        Catch::Matchers::EndsWith(".shard0of1"));
  CHECK(fs::exists(dir + "/" + first));

  // Loads like a single file, into a fresh model and optimizer.
  TinyModel fresh(99);
  Sgd opt2(fresh.parameters(), {.lr = 0.1, .momentum = 0.9});
  int64_t step = 0;
  load_checkpoint(path, fresh.tensors(), &opt2, &step);
  CHECK(step == 3);
  CHECK(fresh.w.to_vector<float>() == m.w.to_vector<float>());
  CHECK(read_checkpoint(path).metadata.at("note") == "x");

  // A later save, even of the same step, writes new shards and removes the ones it supersedes.
  save_sharded_checkpoint(world, {.writer = true, .shard = 0, .shards = 1}, path, m.tensors(), opt,
                          3);
  const std::string second = load_safetensors(path).metadata.at("gpipe.shards");
  CHECK(second != first);
  CHECK(fs::exists(dir + "/" + second));
  CHECK_FALSE(fs::exists(dir + "/" + first));

  // A missing shard is named; nothing half-loaded passes for a checkpoint.
  fs::remove(dir + "/" + second);
  CHECK_THROWS_WITH(read_checkpoint(path), Contains("shard") && Contains("is missing"));
}

TEST_CASE("A failed shard leaves no manifest and names the rank") {
  const std::string dir = testing::scratch_dir("checkpoint_sharded_fail");
  TinyModel m(7);
  Sgd opt(m.parameters(), {.lr = 0.1});
  SoloCommunicator world;
  const std::string path = dir + "/missing_folder/ck.safetensors";
  CHECK_THROWS_WITH(save_sharded_checkpoint(world, {}, path, m.tensors(), opt, 1),
                    Contains("was not taken") && Contains("rank 0"));
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("Tied aliases let a cell's copy load from another cell's name") {
  const std::string dir = testing::scratch_dir("checkpoint_aliases");
  // Saved by one process: the tied tensor once, under "enc.emb".
  TinyModel m(3);
  Adam opt(m.parameters(), {.lr = 0.01});
  for (auto& p : m.parameters())
    p.tensor->set_grad(Tensor::full(p.tensor->shape(), 0.25, p.tensor->dtype()));
  opt.step();
  save_checkpoint(dir + "/one.safetensors", m.tensors(), opt, 2);
  // A later cell holding only its own copy, named "dec.emb" (as in a process per stage).
  Tensor emb = make_parameter(Tensor::zeros(Shape{2, 2}));
  Adam opt2({{"dec.emb", &emb}}, {.lr = 0.01});
  const std::vector<NamedTensor> mine = {{"dec.emb", &emb}};
  CHECK_THROWS_WITH(
      load_checkpoint(dir + "/one.safetensors", mine, &opt2, nullptr, {.allow_unexpected = true}),
      Contains("missing tensor 'dec.emb'"));
  load_checkpoint(dir + "/one.safetensors", mine, &opt2, nullptr,
                  {.allow_unexpected = true, .aliases = {{"enc.emb", "dec.emb"}}});
  CHECK(emb.to_vector<float>() == m.emb.to_vector<float>());
  auto state = [](const Optimizer& o, const std::string& name) {
    for (const NamedTensor& s : o.state())
      if (s.name == name) return s.tensor->to_vector<float>();
    FAIL("no optimizer state " << name);
    return std::vector<float>{};
  };
  CHECK(state(opt2, "dec.emb.exp_avg") == state(opt, "enc.emb.exp_avg"));
  CHECK(state(opt2, "dec.emb.exp_avg_sq") == state(opt, "enc.emb.exp_avg_sq"));
}

}  // namespace
}  // namespace gpipe::optim

namespace gpipe::optim {
namespace {

// The id of a process that has exited and been reaped: kill(pid, 0) fails with ESRCH.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  REQUIRE(pid > 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return pid;
}

TEST_CASE("A save removes its path's temporaries of dead writers, never a live writer's") {
  const std::string dir = testing::scratch_dir("checkpoint_stale_tmp");
  const std::string path = dir + "/ck.safetensors";
  const std::string dead = std::to_string(dead_pid());
  const std::string live = std::to_string(::getppid());  // the test runner: alive
  for (const std::string& f : {path + ".tmp." + dead, path + ".tmp." + live,
                               dir + "/other.safetensors.tmp." + dead, path + ".tmp.x" + dead})
    testing::write_file(f, "partial");
  TinyModel m(3);
  Sgd opt(m.parameters(), {.lr = 0.1});
  save_checkpoint(path, m.tensors(), opt, 1);
  CHECK_FALSE(fs::exists(path + ".tmp." + dead));
  CHECK(fs::exists(path + ".tmp." + live));                   // a live writer's
  CHECK(fs::exists(dir + "/other.safetensors.tmp." + dead));  // another checkpoint's
  CHECK(fs::exists(path + ".tmp.x" + dead));                  // not a temporary's name
  CHECK(fs::exists(path));

  // Sharded: the manifest's and the shards' temporaries, and shards no
  // manifest names (a save killed before its manifest), all of this path.
  const std::string shard_tmp = path + ".step2-abc.shard0of2.tmp." + dead;
  const std::string orphan = path + ".step2-abc.shard1of2";
  const std::string other_orphan = dir + "/other.safetensors.step2-abc.shard1of2";
  for (const std::string& f : {path + ".tmp." + dead, shard_tmp, orphan, other_orphan})
    testing::write_file(f, "partial");
  SoloCommunicator world;
  save_sharded_checkpoint(world, {.writer = true, .shard = 0, .shards = 1}, path, m.tensors(), opt,
                          2);
  CHECK_FALSE(fs::exists(path + ".tmp." + dead));
  CHECK_FALSE(fs::exists(shard_tmp));
  CHECK_FALSE(fs::exists(orphan));
  CHECK(fs::exists(other_orphan));
  CHECK(fs::exists(path + ".tmp." + live));
  int64_t step = 0;
  load_checkpoint(path, m.tensors(), &opt, &step);
  CHECK(step == 2);
}

}  // namespace
}  // namespace gpipe::optim
