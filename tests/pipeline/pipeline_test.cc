// The central guarantee (Invariant 1): the pipeline's gradients equal the
// single-device gradients of the whole mini-batch, for any (K, M), including
// uneven micro-batches; and everything around it (remat, ties, BatchNorm,
// failures, traces).
#include "pipeline/pipeline.h"

#include <dirent.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>
#include <unordered_set>

#include "core/autograd.h"
#include "core/precision.h"
#include "core/rng.h"
#include "layers/conv.h"
#include "models/amoebanet.h"
#include "models/transformer.h"
#include "ops/ops.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "pipeline/balance.h"
#include "pipeline/microbatch.h"
#include "pipeline/profile.h"
#include "pipeline/simulate.h"
#include "tests/pipeline/tiny_transformer.h"

using namespace gpipe;
using Catch::Contains;

namespace {

using testing::tiny;
using testing::token_batch;

// name -> gradient, after one single-device full-batch backward.
std::map<std::string, std::vector<float>> reference_grads(Model m, const Batch& b, double* loss) {
  Tensor l = m.loss->mean(run_layers(m.layers, b.inputs), b.targets);
  *loss = l.item();
  l.backward();
  std::map<std::string, std::vector<float>> g;
  for (const NamedTensor& p : named_state(m.layers))
    if (p.tensor->requires_grad()) g[p.name] = p.tensor->grad().to_vector<float>();
  return g;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 1e-2,
         diff = 0;  // gradients that are zero in exact arithmetic (key biases) are noise
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::abs(a[i])));
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
  }
  return diff / scale;
}

void check_equivalence(int k, int m, int64_t n, ScheduleKind kind, RematMode remat, int v = 1) {
  INFO("K=" << k << " M=" << m << " N=" << n << " schedule=" << schedule_name(kind)
            << " remat=" << remat_name(remat) << " v=" << v);
  const Batch batch = token_batch(n, 5);
  double ref_loss = 0;
  const auto ref = reference_grads(models::transformer(tiny()), batch, &ref_loss);
  Pipeline pipe(models::transformer(tiny()),
                {.K = k,
                 .M = m,
                 .virtual_stages = v,
                 .schedule = kind,
                 .remat = remat,
                 .threads_per_stage = 1},
                batch);
  REQUIRE(static_cast<int>(pipe.cells().size()) == k * v);
  const StepResult r = pipe.train_step(batch);
  CHECK(r.loss == Approx(ref_loss).epsilon(1e-5));
  int compared = 0;
  for (const NamedTensor& p : pipe.named_state()) {
    if (!ref.count(p.name)) continue;  // buffers
    INFO("parameter " << p.name);
    REQUIRE(p.tensor->grad().defined());
    CHECK(max_rel_diff(p.tensor->grad().to_vector<float>(), ref.at(p.name)) < 2e-5);
    ++compared;
  }
  CHECK(compared == static_cast<int>(ref.size()));
}

int thread_count() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n - 2;
}

}  // namespace

TEST_CASE("pipeline: gradients equal single-device full-batch gradients") {
  check_equivalence(1, 1, 8, ScheduleKind::kGPipe, RematMode::kNever);
  check_equivalence(2, 4, 8, ScheduleKind::kGPipe, RematMode::kExceptLast);
  check_equivalence(4, 8, 8, ScheduleKind::kGPipe, RematMode::kAlways);
  check_equivalence(3, 5, 7, ScheduleKind::kGPipe, RematMode::kNever);  // uneven micro-batches
  check_equivalence(3, 5, 7, ScheduleKind::k1F1B, RematMode::kExceptLast);
  check_equivalence(4, 3, 6, ScheduleKind::k1F1B, RematMode::kAlways);
  check_equivalence(3, 5, 7, ScheduleKind::kZBH1, RematMode::kNever);
  check_equivalence(4, 4, 8, ScheduleKind::kZBH1, RematMode::kExceptLast);
  check_equivalence(2, 4, 8, ScheduleKind::kZBH1, RematMode::kAlways);
  // Interleaved: K devices with v cells each (the tiny Transformer's tied
  // embedding sits in the first and last cells, on different devices).
  check_equivalence(2, 4, 8, ScheduleKind::kInterleaved, RematMode::kNever, 2);
  check_equivalence(2, 2, 7, ScheduleKind::kInterleaved, RematMode::kExceptLast, 3);
  check_equivalence(3, 3, 6, ScheduleKind::kInterleaved, RematMode::kAlways, 2);
  // ZB-V: 2K cells in a V (device 0 holds the first and the last).
  check_equivalence(2, 4, 8, ScheduleKind::kZBV, RematMode::kNever, 2);
  check_equivalence(3, 5, 7, ScheduleKind::kZBV, RematMode::kExceptLast, 2);
  check_equivalence(2, 2, 8, ScheduleKind::kZBV, RematMode::kAlways, 2);
}

TEST_CASE("pipeline: interleaved cells go round-robin over the devices and report per device") {
  const Batch batch = token_batch(8, 4);
  Pipeline pipe(models::transformer(tiny()),
                {.K = 2,
                 .M = 4,
                 .virtual_stages = 2,
                 .schedule = ScheduleKind::kInterleaved,
                 .threads_per_stage = 1,
                 .trace = true},
                batch);
  const auto cells = pipe.cells();
  REQUIRE(cells.size() == 4);
  for (size_t c = 0; c < cells.size(); ++c)
    CHECK(cells[c].device == Device(DeviceType::kCPU, c % 2));
  CHECK(pipe.schedule().device_count() == 2);
  CHECK(pipe.memory().size() == 2);  // one entry per device, not per cell
  CHECK(pipe.bubble_formula().text == "(K-1)/(vM+K-1), v=2");
  CHECK(pipe.bubble_formula().value == Approx(1.0 / 9));
  const StepResult r = pipe.train_step(batch);
  CHECK(r.bubble_fraction > 0);
  CHECK(r.bubble_fraction < 1);
  CHECK_THAT(pipe.describe(), Contains("schedule interleaved") && Contains("(K-1)/(vM+K-1)"));
  CHECK_THROWS_WITH(
      Pipeline(models::transformer(tiny()), {.K = 2, .M = 4, .virtual_stages = 2}, batch),
      Contains("v = 2 cells per device needs the interleaved schedule"));
  CHECK_THROWS_WITH(
      Pipeline(models::transformer(tiny()),
               {.K = 2, .M = 3, .virtual_stages = 2, .schedule = ScheduleKind::kInterleaved},
               batch),
      Contains("must be a multiple of K = 2 devices"));
}

TEST_CASE(
    "pipeline: ZB-H1 (split backward) gives exactly 1F1B's loss and gradients, tied weights "
    "included, under each remat mode") {
  const Batch batch = token_batch(8, 11);
  for (RematMode remat : {RematMode::kNever, RematMode::kExceptLast, RematMode::kAlways}) {
    INFO("remat " << remat_name(remat));
    std::map<std::string, std::vector<float>> grads[3];
    double loss[3];
    int i = 0;
    for (ScheduleKind kind :
         {ScheduleKind::k1F1B, ScheduleKind::kZBH1, ScheduleKind::kZBH1LowMem}) {
      Pipeline pipe(
          models::transformer(tiny(0.2)),
          {.K = 3, .M = 4, .schedule = kind, .remat = remat, .threads_per_stage = 1, .seed = 3},
          batch);
      loss[i] = pipe.train_step(batch).loss;
      for (auto& p : pipe.named_state())
        if (p.tensor->grad().defined()) grads[i][p.name] = p.tensor->grad().to_vector<float>();
      ++i;
    }
    for (int j : {1, 2}) {
      INFO((j == 1 ? "zb-h1" : "zb-h1-lowmem"));
      CHECK(loss[0] == loss[j]);
      REQUIRE(grads[0].size() == grads[j].size());
      for (auto& [name, g] : grads[0]) {
        INFO(name);
        CHECK(g == grads[j][name]);
      }
    }
  }
}

TEST_CASE(
    "pipeline: several SGD steps keep matching single-device training; tied copies stay "
    "identical") {
  const Batch batch = token_batch(6, 9);
  Model ref = models::transformer(tiny());
  Pipeline pipe(models::transformer(tiny()), {.K = 3, .M = 3, .threads_per_stage = 1}, batch);
  std::vector<Tensor> ref_params;
  std::unordered_set<TensorImpl*> seen;
  for (auto& l : ref.layers)
    for (auto& p : l->parameters())
      if (seen.insert(p.tensor->impl_ptr().get()).second) ref_params.push_back(*p.tensor);
  auto sgd = [](std::vector<Tensor> params) {
    NoGradGuard ng;
    for (Tensor& p : params) {
      if (!p.grad().defined()) continue;
      p.copy_from(ops::sub(p, ops::mul_scalar(p.grad(), 0.2)));
      p.zero_grad();
    }
  };
  for (int step = 0; step < 4; ++step) {
    Tensor l = ref.loss->mean(run_layers(ref.layers, batch.inputs), batch.targets);
    l.backward();
    sgd(ref_params);
    const StepResult r = pipe.train_step(batch);
    CHECK(r.loss == Approx(l.item()).epsilon(1e-5));
    std::vector<Tensor> ps;
    for (auto& p : pipe.parameters()) ps.push_back(*p.tensor);
    sgd(ps);
  }
  // The shared embedding lives in cells 0, 1 and 2 as three copies: still equal, and equal to the
  // reference.
  std::map<std::string, std::vector<float>> by_name;
  for (auto& p : pipe.named_state()) by_name[p.name] = p.tensor->to_vector<float>();
  CHECK(by_name["src_embed.shared_embedding"] == by_name["output.shared_embedding"]);
  CHECK(by_name["src_embed.shared_embedding"] == by_name["tgt_embed.shared_embedding"]);
  CHECK(max_rel_diff(by_name["output.shared_embedding"],
                     ref.layers.back()->parameters()[0].tensor->to_vector<float>()) < 1e-4);
}

TEST_CASE("pipeline: with dropout, remat and no remat give identical gradients") {
  const Batch batch = token_batch(8, 3);
  std::map<std::string, std::vector<float>> grads[2];
  int i = 0;
  for (RematMode mode : {RematMode::kNever, RematMode::kAlways}) {
    Pipeline pipe(models::transformer(tiny(0.3)), {.K = 2, .M = 4, .remat = mode, .seed = 5},
                  batch);
    pipe.train_step(batch);
    for (auto& p : pipe.named_state())
      if (p.tensor->grad().defined()) grads[i][p.name] = p.tensor->grad().to_vector<float>();
    ++i;
  }
  REQUIRE(grads[0].size() == grads[1].size());
  for (auto& [name, g] : grads[0]) {
    INFO(name);
    CHECK(g == grads[1][name]);
  }
}

namespace {
// conv -> BN -> relu -> pool -> linear as a LayerList of single-tensor layers.
Model bn_model() {
  Model m;
  m.layers.push_back(std::make_shared<Conv2d>("conv", 2, 4, std::array<int64_t, 2>{3, 3}, 1,
                                              ops::Conv2dOptions{.padding = {1, 1}}));
  m.layers.push_back(std::make_shared<BatchNorm>("bn", 4));
  m.layers.push_back(std::make_shared<ActivationLayer>("relu", Activation::kRelu));
  m.layers.push_back(std::make_shared<GlobalAvgPool>("pool"));
  m.layers.push_back(std::make_shared<Linear>("fc", 4, 3, 2));
  m.loss = std::make_shared<CrossEntropyLoss>();
  return m;
}
}  // namespace

TEST_CASE(
    "pipeline: BatchNorm running statistics equal a full-batch step's under every schedule and "
    "remat "
    "mode, with the same gradients") {
  Batch batch{{Tensor::randn(Shape{10, 2, 5, 5}, 4)},
              {Tensor::from_vector<int64_t>({0, 1, 2, 0, 1, 2, 0, 1, 2, 0}, Shape{10})}};
  Model ref = bn_model();
  Tensor l = ref.loss->mean(run_layers(ref.layers, batch.inputs), batch.targets);
  l.backward();
  for (auto& layer : ref.layers) layer->finish_step();
  auto* ref_bn = dynamic_cast<BatchNorm*>(ref.layers[1].get());
  // Each micro-batch is normalised by its own statistics (Note [BatchNorm
  // across micro-batches]), so the gradients are compared between programs:
  // every schedule and remat mode gives the first run's (GPipe, remat always).
  std::map<std::string, std::vector<float>> ref_grads;
  struct Run {
    RematMode mode;
    ScheduleKind kind;
    int v;
  };
  for (auto [mode, kind, v] : {Run{RematMode::kAlways, ScheduleKind::kGPipe, 1},
                               Run{RematMode::kNever, ScheduleKind::kGPipe, 1},
                               Run{RematMode::kAlways, ScheduleKind::kZBH1, 1},
                               Run{RematMode::kExceptLast, ScheduleKind::kZBH1, 1},
                               Run{RematMode::kExceptLast, ScheduleKind::kInterleaved, 2},
                               Run{RematMode::kAlways, ScheduleKind::kZBV, 2}}) {
    INFO(schedule_name(kind) << ", remat " << remat_name(mode) << ", v " << v);
    Model m = bn_model();
    auto* bn = dynamic_cast<BatchNorm*>(m.layers[1].get());
    Pipeline pipe(std::move(m),
                  {.K = 2, .M = 4, .virtual_stages = v, .schedule = kind, .remat = mode}, batch);
    pipe.train_step(batch);
    const bool first = ref_grads.empty();
    for (auto& p : pipe.named_state()) {
      if (!p.tensor->grad().defined()) continue;
      INFO(p.name);
      if (first) ref_grads[p.name] = p.tensor->grad().to_vector<float>();
      REQUIRE(ref_grads.count(p.name));
      CHECK(max_rel_diff(p.tensor->grad().to_vector<float>(), ref_grads[p.name]) < 1e-6);
    }
    CHECK_FALSE(ref_grads.empty());
    const auto rm = bn->running_mean.to_vector<float>(), rv = bn->running_var.to_vector<float>();
    const auto em = ref_bn->running_mean.to_vector<float>(),
               ev = ref_bn->running_var.to_vector<float>();
    for (int c = 0; c < 4; ++c) {
      CHECK(rm[c] == Approx(em[c]).margin(1e-6));
      CHECK(rv[c] == Approx(ev[c]).epsilon(1e-5));
    }
  }
}

TEST_CASE(
    "pipeline: a failing stage ends the step with its stage and micro-batch named; the next step "
    "works") {
  const int threads_before = thread_count();
  {
    const Batch batch = token_batch(8, 1);
    Model m = models::transformer(tiny());
    bool armed = true;
    // A layer in the middle that throws on micro-batch 2 while armed.
    auto bomb = std::make_shared<Lambda>(
        "bomb",
        [&](const Tensor& x) {
          if (armed && current_rng_context().micro_batch == 2) throw Error("injected failure");
          return x;
        },
        [](const TensorSpec& s) { return s; });
    struct Wrap final : Layer {
      std::shared_ptr<Lambda> inner;
      explicit Wrap(std::shared_ptr<Lambda> l) : Layer("bomb"), inner(std::move(l)) {}
      Bundle forward(const Bundle& in) override {
        Bundle out = in;
        out[0] = inner->forward(in[0]);
        return out;
      }
      BundleSpec output_spec(const BundleSpec& in) const override { return in; }
    };
    m.layers.insert(m.layers.begin() + 8,
                    std::make_shared<Wrap>(bomb));  // 14 layers; stage 2 is [8, 11)
    Pipeline pipe(std::move(m), {.K = 4, .M = 4, .balance = {4, 4, 3, 3}, .timeout_seconds = 30},
                  batch);
    CHECK_THROWS_WITH(pipe.train_step(batch), Contains("failed in stage 2") &&
                                                  Contains("forward of micro-batch 2") &&
                                                  Contains("injected failure"));
    for (auto& p : pipe.parameters()) CHECK_FALSE(p.tensor->grad().defined());
    armed = false;
    const StepResult r = pipe.train_step(batch);
    CHECK(std::isfinite(r.loss));
  }
  CHECK(thread_count() == threads_before);
}

TEST_CASE(
    "pipeline: a failure while another stage waits in the step's collective ends the step at "
    "once") {
  // Stage 0 fails in its last backward (GPipe: micro-batch 0), when stage 1
  // has finished its backwards and waits in reduce_tied: cancelling the
  // local collectives wakes it, long before the 60 s timeout.
  std::atomic<bool> armed{true};
  struct BackwardBomb final : Layer {
    std::atomic<bool>* armed;
    explicit BackwardBomb(std::atomic<bool>* a) : Layer("backward_bomb"), armed(a) {}
    Bundle forward(const Bundle& in) override {
      Bundle out = in;
      Tensor y = in[0].detach().clone();
      std::atomic<bool>* flag = armed;
      const uint64_t m = current_rng_context().micro_batch;
      record("backward_bomb", {in[0]}, y, [flag, m](const std::vector<Tensor>& g) {
        if (*flag && m == 0) throw Error("backward bomb");
        return g;
      });
      out[0] = y;
      return out;
    }
    BundleSpec output_spec(const BundleSpec& in) const override { return in; }
  };
  const Batch batch = token_batch(8, 3);
  Model m = models::transformer(tiny());
  m.layers.insert(m.layers.begin() + 2, std::make_shared<BackwardBomb>(&armed));  // cell 0 = [0, 7)
  Pipeline pipe(std::move(m), {.K = 2, .M = 4, .balance = {7, 7}, .timeout_seconds = 60}, batch);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(pipe.train_step(batch), Contains("failed in stage 0") &&
                                                Contains("backward of micro-batch 0") &&
                                                Contains("backward bomb"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 30);
  for (auto& p : pipe.parameters()) CHECK_FALSE(p.tensor->grad().defined());
  armed = false;
  CHECK(std::isfinite(pipe.train_step(batch).loss));  // the group works again after resume()
}

TEST_CASE("pipeline: a rank failing outside its program ends the run at once on every stage") {
  // Stages 0 and 2 cannot cut a 3-row batch into M = 4; stage 1 would wait
  // for activations until the timeout if their failure did not wake it.
  Pipeline pipe(models::transformer(tiny()), {.K = 3, .M = 4, .timeout_seconds = 60},
                token_batch(8, 1));
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(pipe.train_step(token_batch(3, 1)),
                    Contains("cannot cut a mini-batch of N = 3 examples into M = 4"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 30);
  // Evaluation without targets: the last stage refuses, the others stop waiting in the final sum.
  t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(pipe.evaluate(Batch{token_batch(8, 1).inputs, {}}),
                    Contains("the last stage needs the batch's targets"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 30);
  const Batch good = token_batch(8, 2);
  CHECK(std::isfinite(pipe.train_step(good).loss));  // the local group is whole again
  CHECK(std::isfinite(pipe.evaluate(good)));
  // A hand-written program with the split backward runs like one with B.
  std::map<std::string, std::vector<float>> grads[2];
  int i = 0;
  for (const char* text :
       {"schedule K=1 M=2 train\n0: F0 L0 F1 L1 B0 B1 reduce_replicas reduce_tied\n",
        "schedule K=1 M=2 train\n0: F0 L0 I0 F1 L1 I1 W1 W0 reduce_replicas reduce_tied\n"}) {
    auto program = std::make_shared<Schedule>(parse_schedule_text(text, "test"));
    Pipeline p(models::transformer(tiny()), {.M = 2, .custom_schedule = program}, good);
    CHECK(std::isfinite(p.train_step(good).loss));
    for (auto& t : p.named_state())
      if (t.tensor->grad().defined()) grads[i][t.name] = t.tensor->grad().to_vector<float>();
    ++i;
  }
  REQUIRE(grads[0].size() == grads[1].size());
  for (auto& [name, g] : grads[0]) {
    INFO(name);
    CHECK(max_rel_diff(g, grads[1][name]) < 1e-6);  // W1 before W0: another sum order
  }
}

TEST_CASE("pipeline: bad configurations are rejected with clear messages") {
  const Batch batch = token_batch(4, 1);
  CHECK_THROWS_WITH(Pipeline(models::transformer(tiny()), {.K = 14}, batch),
                    Contains("K = 14 cells need at least 14 layers"));
  CHECK_THROWS_WITH(Pipeline(models::transformer(tiny()), {.M = 5}, batch).train_step(batch),
                    Contains("cannot cut a mini-batch of N = 4 examples into M = 5"));
  CHECK_THROWS_WITH(Pipeline(models::transformer(tiny()), {.K = 2, .balance = {3, 3, 1}}, batch),
                    Contains("balance has 3 cells but K = 2"));
  CHECK_THROWS_WITH(Pipeline(models::transformer(tiny()), {.balance = {3, 3}}, batch),
                    Contains("cell sizes sum to 6 but the model has 13 layers"));
  CHECK_THROWS_WITH(
      Pipeline(models::transformer(tiny()), {.K = 2, .devices = devices("cpu", 3)}, batch),
      Contains("got 3 devices for K = 2"));
}

namespace {
// A strict check that `doc` is well-formed XML: one root element, every tag
// closed in order, attribute values quoted, only the five predefined
// entities. Returns "" or what is wrong.
std::string xml_problem(const std::string& doc) {
  std::vector<std::string> open;
  size_t i = 0, roots = 0;
  auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':';
  };
  auto entity_ok = [&](size_t at) {
    for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"})
      if (doc.compare(at, std::strlen(e), e) == 0) return true;
    return false;
  };
  while (i < doc.size()) {
    if (doc[i] == '&') {
      if (!entity_ok(i)) return "a bare '&' at " + std::to_string(i);
      ++i;
      continue;
    }
    if (doc[i] != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(doc[i])))
        return "text outside the root at " + std::to_string(i);
      ++i;
      continue;
    }
    const bool closing = i + 1 < doc.size() && doc[i + 1] == '/';
    size_t j = i + (closing ? 2 : 1);
    const size_t name_start = j;
    while (j < doc.size() && name_char(doc[j])) ++j;
    const std::string name = doc.substr(name_start, j - name_start);
    if (name.empty()) return "a tag without a name at " + std::to_string(i);
    bool self_closing = false;
    while (j < doc.size() && doc[j] != '>') {
      if (doc[j] == '"') {
        const size_t end = doc.find('"', j + 1);
        if (end == std::string::npos) return "an unterminated attribute in <" + name + ">";
        const std::string value = doc.substr(j + 1, end - j - 1);
        if (value.find('<') != std::string::npos) return "a '<' in an attribute of <" + name + ">";
        for (size_t a = value.find('&'); a != std::string::npos; a = value.find('&', a + 1))
          if (!entity_ok(j + 1 + a)) return "a bare '&' in an attribute of <" + name + ">";
        j = end + 1;
        continue;
      }
      if (doc[j] == '/' && j + 1 < doc.size() && doc[j + 1] == '>') self_closing = true;
      ++j;
    }
    if (j >= doc.size()) return "an unterminated tag <" + name;
    if (closing) {
      if (open.empty() || open.back() != name) return "</" + name + "> closes nothing open";
      open.pop_back();
    } else if (!self_closing) {
      if (open.empty()) ++roots;
      open.push_back(name);
    } else if (open.empty()) {
      ++roots;
    }
    i = j + 1;
  }
  if (!open.empty()) return "<" + open.back() + "> is never closed";
  if (roots != 1) return std::to_string(roots) + " root elements";
  return "";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
}  // namespace

TEST_CASE(
    "pipeline: the trace's SVG is well-formed XML with one box per traced action, for ZB-H1 and "
    "interleaved runs, and the planned program draws the same way") {
  const Batch batch = token_batch(8, 2);
  CHECK(xml_problem("<a><b x=\"1\"/></a>").empty());
  CHECK_FALSE(xml_problem("<a><b></a>").empty());
  CHECK_FALSE(xml_problem("<a>R&D</a>").empty());
  CHECK_FALSE(xml_problem("<a x=\"<\"/>").empty());
  const char* tmp = std::getenv("TEST_TMPDIR");
  for (auto [kind, v] :
       {std::pair{ScheduleKind::kZBH1, 1}, std::pair{ScheduleKind::kInterleaved, 2}}) {
    INFO(schedule_name(kind));
    Pipeline pipe(models::transformer(tiny()),
                  {.K = 2, .M = 4, .virtual_stages = v, .schedule = kind, .trace = true}, batch);
    pipe.train_step(batch);
    const std::string path =
        std::string(tmp ? tmp : "/tmp") + "/gpipe_svg_" + schedule_name(kind) + ".json";
    pipe.write_trace(path);
    const std::string svg = read_file(svg_path_for(path));
    CHECK(xml_problem(svg) == "");
    size_t boxes = 0;
    for (size_t at = svg.find("<rect class=\"box\""); at != std::string::npos;
         at = svg.find("<rect class=\"box\"", at + 1))
      ++boxes;
    CHECK(boxes == pipe.tracer().events().size());
    if (kind == ScheduleKind::kZBH1)
      CHECK_THAT(svg,
                 Contains("(backward-input, step 0)") && Contains("(backward-weight, step 0)"));
    else
      CHECK_THAT(svg, Contains("cpu:0 (cells 0,2)") && Contains("F1 cell 2"));
    // The planned program on a unit clock, as --schedule-svg draws it.
    const Simulation sim = simulate(pipe.schedule(), CostModel::uniform(2 * v, 1.0 / v, 2.0 / v));
    const std::string planned =
        timeline_svg(timeline_events(sim), {"device 0", "device 1"}, "units");
    CHECK(xml_problem(planned) == "");
  }
}

TEST_CASE("pipeline: trace, bubble and memory report") {
  const Batch batch = token_batch(8, 2);
  Pipeline pipe(models::transformer(tiny()), {.K = 2, .M = 4, .trace = true}, batch);
  const StepResult r = pipe.train_step(batch);
  CHECK(r.bubble_fraction > 0.0);
  CHECK(r.bubble_fraction < 1.0);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/gpipe_trace_test.json";
  pipe.write_trace(path);
  std::ifstream in(path);
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(json.rfind("{\"displayTimeUnit\"", 0) == 0);
  CHECK_THAT(json, Contains("\"name\":\"F3\"") && Contains("\"cat\":\"recompute\"") &&
                       Contains("\"name\":\"send B1\"") && Contains("stage 1 (cpu:1)") &&
                       Contains("\"name\":\"reduce_tied\""));
  // The picture beside it: one box per traced action, tags balanced.
  REQUIRE(svg_path_for(path) == path.substr(0, path.size() - 5) + ".svg");
  std::ifstream svg_in(svg_path_for(path));
  const std::string svg((std::istreambuf_iterator<char>(svg_in)), std::istreambuf_iterator<char>());
  CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  CHECK(svg.size() > 7);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t at = svg.find(needle); at != std::string::npos; at = svg.find(needle, at + 1)) ++n;
    return n;
  };
  CHECK(count("<rect class=\"box\"") == pipe.tracer().events().size());
  CHECK(count("<text") == count("</text>"));
  CHECK(count("<title>") == count("</title>"));
  CHECK(count("<rect class=\"box\"") == count("</rect>"));
  CHECK(svg.find('&') == std::string::npos);  // nothing unescaped to trip a parser
  const auto mem = pipe.memory();
  REQUIRE(mem.size() == 2);
  CHECK(mem[0].device == Device("cpu:0"));
  CHECK(mem[0].parameter_bytes > 0);
  CHECK(mem[1].peak_activation_bytes > 0);
  CHECK_THAT(pipe.describe(), Contains("cpu:1") && Contains("ideal bubble"));
}

TEST_CASE(
    "pipeline: AmoebaNet-D and -B gradients equal single-device ones (BatchNorm as a fixed affine "
    "map)") {
  // With BatchNorm in eval mode (running statistics) the network has no
  // cross-example coupling, so any (K, M) must give the full-batch gradients.
  models::AmoebaNetConfig cfg{
      .num_normal_cells = 1, .filters = 8, .in_channels = 1, .num_classes = 5, .seed = 2};
  const Batch batch{{Tensor::randn(Shape{7, 1, 32, 32}, 21)},
                    {Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 0, 1}, Shape{7})}};
  auto build = GENERATE(as<Model (*)(const models::AmoebaNetConfig&)>{}, models::amoebanet_d,
                        models::amoebanet_b);
  INFO((build == &models::amoebanet_d ? "AmoebaNet-D" : "AmoebaNet-B"));
  Model ref = build(cfg);
  for (auto& l : ref.layers) l->eval();
  Tensor loss = ref.loss->mean(run_layers(ref.layers, batch.inputs), batch.targets);
  loss.backward();
  std::map<std::string, std::vector<float>> want;
  for (const NamedTensor& p : named_state(ref.layers))
    if (p.tensor->requires_grad()) want[p.name] = p.tensor->grad().to_vector<float>();
  for (auto [k, m] : {std::pair{2, 3}, std::pair{3, 7}, std::pair{4, 2}}) {
    INFO("K=" << k << " M=" << m);
    Pipeline pipe(build(cfg), {.K = k, .M = m, .threads_per_stage = 1}, batch);
    pipe.train(false);
    const StepResult r = pipe.train_step(batch);
    CHECK(r.loss == Approx(loss.item()).epsilon(1e-5));
    for (const NamedTensor& p : pipe.parameters()) {
      INFO(p.name);
      CHECK(max_rel_diff(p.tensor->grad().to_vector<float>(), want.at(p.name)) < 1e-4);
    }
  }
}

TEST_CASE("pipeline: the gradient norm and clipping equal optim's on the single-device gradients") {
  const Batch batch = token_batch(6, 9);
  Model ref = models::transformer(tiny());
  ref.loss->mean(run_layers(ref.layers, batch.inputs), batch.targets).backward();
  const std::vector<NamedTensor> ref_params = named_parameters(ref.layers);
  const double want = optim::grad_norm(ref_params);  // the tied table once
  REQUIRE(want > 0);
  for (int k : {1, 2, 3}) {
    INFO("K=" << k);
    Pipeline pipe(models::transformer(tiny()), {.K = k, .M = 2, .threads_per_stage = 1}, batch);
    pipe.train_step(batch);
    CHECK(pipe.grad_norm() == Approx(want).epsilon(1e-6));  // tied copies counted once
    // Clipping to half the norm scales every gradient by the same factor as optim's.
    CHECK(pipe.clip_grad_norm(want / 2) == Approx(want).epsilon(1e-6));
    CHECK(pipe.grad_norm() == Approx(want / 2 * want / (want + 1e-6)).epsilon(1e-6));
  }
  CHECK(optim::clip_grad_norm(ref_params, want / 2) == want);
  // Both scale by max_norm / (norm + 1e-6) (float32 gradients: rounded per element).
  CHECK(optim::grad_norm(ref_params) == Approx(want / 2 * want / (want + 1e-6)).epsilon(1e-6));
}

TEST_CASE("pipeline: evaluate and predict agree with single-device forward and keep the mode") {
  const Batch batch = token_batch(7, 4);
  Model ref = models::transformer(tiny());
  double want;
  {
    NoGradGuard ng;
    want = ref.loss->mean(run_layers(ref.layers, batch.inputs), batch.targets).item();
  }
  Tensor want_out;
  {
    NoGradGuard ng;
    want_out = run_layers(ref.layers, batch.inputs)[0];
  }
  Pipeline pipe(models::transformer(tiny()), {.K = 3, .M = 2}, batch);
  CHECK(pipe.evaluate(batch) == Approx(want).epsilon(1e-5));
  const Bundle out = pipe.predict(batch.inputs);
  REQUIRE(out.size() == 1);
  CHECK(out[0].shape() == Shape{7, 4, 17});
  CHECK(max_rel_diff(out[0].to_vector<float>(), want_out.to_vector<float>()) < 1e-5);
  // One micro-batch per row (fewer fill-drain bubbles for big evaluation batches): the same
  // numbers.
  CHECK(max_rel_diff(pipe.predict(batch.inputs, {.micro_batches = 7})[0].to_vector<float>(),
                     want_out.to_vector<float>()) < 1e-5);
  CHECK(pipe.evaluate(batch, 7) == Approx(want).epsilon(1e-5));
  CHECK_THROWS_WITH(pipe.predict(batch.inputs, {.micro_batches = -1}),
                    Contains("micro_batches must be >= 0"));
  // More micro-batches than rows: evaluation uses one per row.
  Pipeline many(models::transformer(tiny()), {.K = 2, .M = 7}, batch);
  CHECK(many.evaluate(token_batch(3, 4)) ==
        Approx(Pipeline(models::transformer(tiny()), {}, batch).evaluate(token_batch(3, 4)))
            .epsilon(1e-5));
  pipe.train(false);
  pipe.evaluate(batch);
  CHECK_FALSE(ref.layers[0]->training() == false);  // the reference was never switched
  const StepResult r = pipe.train_step(batch);      // still eval mode: dropout off, BN fixed
  CHECK(std::isfinite(r.loss));
}

TEST_CASE(
    "pipeline: evaluation is a pipelined program: stage 1 runs micro-batch 0 before stage 0 runs "
    "micro-batch 1") {
  // A pass-through layer at the start of each cell. Stage 0's waits, at
  // micro-batch 1, until stage 1 has begun micro-batch 0: stage by stage,
  // that never happens and the wait gives up after 20 s.
  std::atomic<bool> stage1_started{false}, waited_in_vain{false};
  auto gate = [&](const char* name, bool first_cell) {
    auto fn = [&, first_cell](const Tensor& x) {
      const uint64_t m = current_rng_context().micro_batch;
      if (!first_cell && m == 0) stage1_started = true;
      if (first_cell && m == 1) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!stage1_started && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (!stage1_started) waited_in_vain = true;
      }
      return x;
    };
    struct Gate final : Layer {
      std::shared_ptr<Lambda> inner;
      Gate(const char* n, std::shared_ptr<Lambda> l) : Layer(n), inner(std::move(l)) {}
      Bundle forward(const Bundle& in) override {
        Bundle out = in;
        out[0] = inner->forward(in[0]);
        return out;
      }
      BundleSpec output_spec(const BundleSpec& in) const override { return in; }
    };
    return std::make_shared<Gate>(
        name, std::make_shared<Lambda>(name, fn, [](const TensorSpec& t) { return t; }));
  };
  const Batch batch = token_batch(8, 4);
  Model m = models::transformer(tiny());
  m.layers.insert(m.layers.begin() + 7,
                  gate("gate1", false));  // after gate0 goes in: layer 8, cell 1 = [8, 15)
  m.layers.insert(m.layers.begin(), gate("gate0", true));
  Pipeline pipe(std::move(m), {.K = 2, .M = 4, .balance = {8, 7}}, batch);
  REQUIRE(pipe.cells()[1].first_layer == 8);
  const double loss = pipe.evaluate(batch);
  CHECK(std::isfinite(loss));
  CHECK(stage1_started);
  CHECK_FALSE(waited_in_vain);
}

TEST_CASE(
    "profile: layer profiles predict each device's peak activation bytes through the simulator, "
    "within 10% for GPipe, 1F1B and ZB-H1") {
  const Batch batch = token_batch(8, 7);
  const int m = 4;
  // Profiles of a fresh copy of the model on one micro-batch.
  Model fresh = models::transformer(tiny());
  const std::vector<Batch> micro = split_micro_batches(batch, m);
  const std::vector<LayerProfile> profile = profile_layers(fresh.layers, micro[0].inputs);
  REQUIRE(profile.size() == fresh.layers.size());
  int64_t sample_bytes = 0;
  for (const Tensor& t : micro[0].inputs) sample_bytes += static_cast<int64_t>(t.nbytes());
  for (const LayerProfile& p : profile) {
    CHECK(p.forward_seconds > 0);
    CHECK(p.activation_bytes >= p.output_bytes);
  }
  // The loss on the last layer's outputs.
  Bundle h = micro[0].inputs;
  {
    NoGradGuard no_grad;
    h = run_layers(fresh.layers, h);
  }
  const LayerProfile loss = profile_loss(*fresh.loss, h, micro[0].targets);
  CHECK(loss.activation_bytes > 0);
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kZBH1}) {
    INFO(schedule_name(kind));
    Pipeline pipe(
        models::transformer(tiny()),
        {.K = 2, .M = m, .schedule = kind, .remat = RematMode::kNever, .threads_per_stage = 1},
        batch);
    pipe.train_step(batch);
    pipe.zero_grad();
    pipe.reset_memory_peaks();
    pipe.train_step(batch);
    CostModel costs;
    for (int c = 0; c < 2; ++c) {
      const int64_t b = pipe.partition().begin(c), e = pipe.partition().end(c);
      costs.stages.push_back(cell_costs(profile, b, e,
                                        b == 0 ? sample_bytes : profile[b - 1].output_bytes,
                                        c == 1 ? &loss : nullptr));
    }
    const Simulation sim = simulate(pipe.schedule(), costs);
    const auto mem = pipe.memory();
    REQUIRE(mem.size() == 2);
    for (int d = 0; d < 2; ++d) {
      const double measured = static_cast<double>(mem[d].peak_activation_bytes);
      const double predicted = sim.device_peak_activation_bytes[d];
      INFO("device " << d << ": predicted " << predicted << " measured " << measured);
      // Within 10% (this machine: 1-8% under; the transients inside a
      // layer's forward are not modelled).
      CHECK(std::abs(predicted / measured - 1.0) <= 0.10);
    }
  }
}

namespace {

struct PrecisionRun {
  double loss = 0;
  std::map<std::string, std::vector<float>> grads;
  int64_t bytes = 0;  // sent across cell boundaries
};

PrecisionRun run_at(Precision p, int k, int m, RematMode remat, const Batch& batch) {
  Pipeline pipe(models::transformer(tiny()),
                {.K = k, .M = m, .remat = remat, .threads_per_stage = 1, .precision = p}, batch);
  PrecisionRun r;
  r.loss = pipe.train_step(batch).loss;
  for (const NamedTensor& t : pipe.named_state())
    if (t.tensor->requires_grad()) {
      REQUIRE(t.tensor->grad().dtype() == DType::kFloat32);  // master gradients stay float32
      r.grads[t.name] = t.tensor->grad().to_vector<float>();
    }
  for (const auto& [link, bytes] : pipe.bytes_sent()) r.bytes += bytes;
  return r;
}

}  // namespace

TEST_CASE("pipeline: in bfloat16 and float16, pipelined gradients equal single-device ones") {
  const Batch batch = token_batch(8, 5);
  for (Precision p : {Precision::kBFloat16, Precision::kFloat16}) {
    INFO("precision " << precision_name(p));
    // Single device, whole batch, at the same precision: run_layers rounds at
    // the same layer boundaries a pipeline does.
    Model model = models::transformer(tiny());
    Tensor loss;
    {
      PrecisionScope scope(p);
      loss = model.loss->mean(run_layers(model.layers, batch.inputs), batch.targets);
    }
    const PrecisionRun one = run_at(p, 1, 1, RematMode::kNever, batch);
    CHECK(one.loss == loss.item());  // the same operations: the same loss, bit for bit
    // The same micro-batches on 1 and on K cells: equal to float32 round-off
    // (the tied embedding's per-cell gradients add in another order).
    const PrecisionRun ref = run_at(p, 1, 4, RematMode::kNever, batch);
    for (int k : {2, 3}) {
      for (RematMode remat : {RematMode::kNever, RematMode::kAlways}) {
        INFO("K=" << k << " remat=" << remat_name(remat));
        const PrecisionRun got = run_at(p, k, 4, remat, batch);
        CHECK(got.loss == Approx(ref.loss).epsilon(1e-6));
        for (const auto& [name, g] : ref.grads) {
          INFO(name);
          CHECK(max_rel_diff(got.grads.at(name), g) < 1e-5);
        }
      }
    }
    // 16-bit boundaries: half the bytes of float32 ones (the same messages).
    const PrecisionRun f32 = run_at(Precision::kFloat32, 3, 4, RematMode::kNever, batch);
    const PrecisionRun half = run_at(p, 3, 4, RematMode::kNever, batch);
    REQUIRE(f32.bytes > 0);
    CHECK(half.bytes * 2 <= f32.bytes + 4 * 1024);  // the loss and token messages stay as they are
    CHECK(half.bytes * 2 >= f32.bytes - 64 * 1024);
    // And the precision did change the arithmetic, within a 16-bit band.
    const PrecisionRun f32_one = run_at(Precision::kFloat32, 1, 4, RematMode::kNever, batch);
    CHECK(ref.loss != f32_one.loss);
    CHECK(ref.loss == Approx(f32_one.loss).epsilon(2e-2));
    // The whole gradient within a 16-bit band of float32's (relative L2).
    double diff2 = 0, norm2 = 0;
    for (const auto& [name, g] : ref.grads) {
      const std::vector<float>& f = f32_one.grads.at(name);
      for (size_t i = 0; i < g.size(); ++i) {
        diff2 += (static_cast<double>(g[i]) - f[i]) * (static_cast<double>(g[i]) - f[i]);
        norm2 += static_cast<double>(f[i]) * f[i];
      }
    }
    UNSCOPED_INFO("gradient relative L2 difference from float32: " << std::sqrt(diff2 / norm2));
    CHECK(std::sqrt(diff2 / norm2) < (p == Precision::kBFloat16 ? 0.05 : 0.01));
    CHECK(std::sqrt(diff2 / norm2) > 0);
  }
}

namespace {

// Mean training loss per window of `window` steps, training `model` on a
// fixed set of batches through K = 2, M = 2 at precision p (Adam).
std::vector<double> curve(Model model, const std::vector<Batch>& batches, Precision p, int steps,
                          int window, double lr, double loss_scale = 1) {
  Pipeline pipe(std::move(model), {.K = 2, .M = 2, .threads_per_stage = 1, .precision = p},
                batches[0]);
  optim::Adam opt(pipe.parameters(), {.lr = lr});
  pipe.set_loss_scale(loss_scale);
  std::vector<double> means;
  double sum = 0;
  for (int s = 0; s < steps; ++s) {
    sum += pipe.train_step(batches[s % batches.size()]).loss;
    if (loss_scale != 1) pipe.scale_grads(1 / loss_scale);
    opt.step();
    pipe.zero_grad();
    if ((s + 1) % window == 0) {
      means.push_back(sum / window);
      sum = 0;
    }
  }
  return means;
}

void check_band(const std::vector<double>& ref, const std::vector<double>& got, double band) {
  REQUIRE(ref.size() == got.size());
  CHECK(ref.back() < 0.85 * ref.front());  // it learns
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO("window " << i << ": fp32 " << ref[i] << ", 16-bit " << got[i]);
    CHECK(std::abs(got[i] - ref[i]) <= band * ref[i]);
  }
}

}  // namespace

TEST_CASE("pipeline: bf16 and fp16 training curves stay within a band of fp32's") {
  SECTION("Transformer") {
    // 16 batches: learning, not memorising (a memorised set's curve is chaotic
    // near zero loss, at any precision).
    std::vector<Batch> batches;
    for (uint64_t i = 0; i < 16; ++i) batches.push_back(token_batch(8, 20 + i));
    const Precision kinds[] = {Precision::kFloat32, Precision::kBFloat16, Precision::kFloat16};
    std::vector<std::vector<double>> runs;
    for (Precision p : kinds)
      runs.push_back(curve(models::transformer(tiny()), batches, p, 240, 20, 3e-3,
                           p == Precision::kFloat16 ? 1024 : 1));
    check_band(runs[0], runs[1], 0.03);
    check_band(runs[0], runs[2], 0.03);
  }
  SECTION("AmoebaNet-D") {
    models::AmoebaNetConfig c;
    c.num_normal_cells = 1;
    c.filters = 8;
    c.in_channels = 1;
    c.small_input = true;
    c.seed = 3;
    // Labels the images determine (which quadrant is brightest) and a steady
    // learning rate, so the run learns a rule: memorising random labels at
    // 3e-3 (this test's first form) drove the loss near zero, where the
    // curve is chaotic at any precision and a relative band compares
    // round-off (5-10% apart there once convolution gradients became
    // bfloat16 products; here within 1.5%).
    std::vector<Batch> batches;
    for (uint64_t i = 0; i < 16; ++i) {
      Tensor x = Tensor::randn(Shape{8, 1, 8, 8}, 40 + i);
      const std::vector<float> px = x.to_vector<float>();
      std::vector<int64_t> y(8);
      for (int64_t j = 0; j < 8; ++j) {
        float best = -1e30f;
        for (int64_t q = 0; q < 4; ++q) {
          float sum = 0;
          for (int64_t r = 0; r < 4; ++r)
            for (int64_t col = 0; col < 4; ++col)
              sum += px[j * 64 + ((q / 2) * 4 + r) * 8 + (q % 2) * 4 + col];
          if (sum > best) {
            best = sum;
            y[j] = q;
          }
        }
      }
      batches.push_back({{x}, {Tensor::from_vector(y, Shape{8})}});
    }
    const auto ref = curve(models::amoebanet(c), batches, Precision::kFloat32, 48, 8, 1e-3);
    check_band(ref, curve(models::amoebanet(c), batches, Precision::kBFloat16, 48, 8, 1e-3), 0.05);
  }
}

TEST_CASE("balance by memory counts float activations in 16 bits under bf16 and fp16") {
  Model model = models::transformer(tiny());
  const Batch batch = token_batch(4, 1);
  std::vector<BundleSpec> specs;
  specs.push_back(infer_specs(model.layers, spec_of(batch.inputs), &specs));
  const std::vector<double> f32 =
      layer_costs(model.layers, specs, BalanceBy::kMemory, batch.inputs);
  for (Precision p : {Precision::kBFloat16, Precision::kFloat16}) {
    INFO(precision_name(p));
    std::vector<double> half;
    {
      PrecisionScope scope(p);
      half = layer_costs(model.layers, specs, BalanceBy::kMemory, batch.inputs);
    }
    REQUIRE(half.size() == f32.size());
    for (size_t i = 0; i < f32.size(); ++i) {
      INFO("layer " << i << " (" << model.layers[i]->name() << ")");
      // Parameters, gradients and Adam moments stay float32: 16 bytes each.
      const double state = 16.0 * static_cast<double>(model.layers[i]->parameter_count());
      double float_out = 0, other_out = 0;
      for (const TensorSpec& t : specs[i + 1])
        (is_float_like(t.dtype) ? float_out : other_out) +=
            static_cast<double>(t.shape.numel() * dtype_size(t.dtype));
      CHECK(f32[i] == state + float_out + other_out);
      CHECK(half[i] == state + float_out / 2 + other_out);
    }
  }
}
