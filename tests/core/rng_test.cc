#include "core/rng.h"

#include <catch2/catch.hpp>
#include <set>

using namespace gpipe;

TEST_CASE("rng: Philox4x32-10 matches the published known-answer vectors") {
  // Random123 kat_vectors: philox4x32 10 rounds.
  auto r = philox4x32({0, 0, 0, 0}, 0);
  CHECK(r == std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  r = philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffffffffffull);
  CHECK(r == std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  r = philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0x299f31d0a4093822ull);
  CHECK(r == std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdcceb, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("rng: a stream is a pure function of (key, index)") {
  std::vector<float> all(100), part(30);
  philox_uniform(42, 0, all.data(), 100);
  philox_uniform(42, 37, part.data(), 30);  // a window in the middle, unaligned
  for (int i = 0; i < 30; ++i) CHECK(part[i] == all[37 + i]);
  std::vector<double> n1(11), n2(5);
  philox_normal(9, 0, n1.data(), 11);
  philox_normal(9, 3, n2.data(), 5);
  for (int i = 0; i < 5; ++i) CHECK(n2[i] == n1[3 + i]);
  for (float u : all) CHECK((u >= 0 && u < 1));
}

TEST_CASE("rng: context keys differ per step, micro-batch, layer and salt") {
  RngContext c{.seed = 1, .step = 2, .micro_batch = 3, .layer = 4};
  std::set<uint64_t> keys{c.key()};
  RngContext d = c;
  d.step = 5;
  keys.insert(d.key());
  d = c;
  d.micro_batch = 0;
  keys.insert(d.key());
  d = c;
  d.layer = 0;
  keys.insert(d.key());
  keys.insert(c.key(1));
  CHECK(keys.size() == 5);
  {
    RngScope scope(c);
    CHECK(current_rng_context() == c);
  }
  CHECK(current_rng_context() == RngContext{});
}
