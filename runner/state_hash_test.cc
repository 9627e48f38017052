// The state hashes of runner/runner.h: the word hash, fed in pieces and
// empty runs, and the `state` hash of a recurrent layer (docs/trace-runner.md, "Where
// TRACE.md leaves room"), both checked against their definitions.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "kvspec/core/layout.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/runner/runner.h"

namespace kvspec::trace {
namespace {

// n floats counting up from `start` in steps of 1.
std::vector<float> Filled(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

uint32_t BitsOf(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// The word hash of runner.h, written from its comment.
uint64_t ReferenceWordHash(const std::vector<uint32_t>& values) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < values.size(); i += 2) {
    const uint64_t lo = values[i];
    const uint64_t hi = i + 1 < values.size() ? values[i + 1] : 0;
    const uint64_t w = lo | (hi << 32);
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 32;
  }
  return Mix(h ^ values.size());
}

// Feeding a sequence in pieces, empty runs of floats among them (after an
// odd count too), gives the hash of the whole sequence.
TEST(WordHasherEdges, PiecesAndEmptyRunsHashAsTheWholeSequence) {
  const std::vector<float> f = {1.5f, -2.0f, 0.25f, 3.0f, -0.125f, 7.0f, 9.5f};
  std::vector<uint32_t> bits;
  for (float x : f) bits.push_back(BitsOf(x));
  // Piece sizes; 0 is an empty Floats call.
  const std::vector<std::vector<size_t>> splits = {
      {7}, {1, 0, 6}, {1, 0, 0, 2, 0, 4}, {3, 0, 1, 0, 3}, {0, 7, 0}, {2, 1, 0, 4}};
  for (const auto& split : splits) {
    WordHasher h;
    size_t at = 0;
    for (size_t n : split) {
      h.Floats(f.data() + at, n);  // a valid pointer even for n == 0
      at += n;
    }
    ASSERT_EQ(at, f.size());
    EXPECT_EQ(h.value(), ReferenceWordHash(bits));
  }
  // One Value, then an empty run: the hash of that one value.
  WordHasher one;
  one.Value(bits[0]);
  one.Floats(f.data() + 1, 0);
  EXPECT_EQ(one.value(), ReferenceWordHash({bits[0]}));
  EXPECT_EQ(WordHasher().value(), ReferenceWordHash({}));
}

// A recurrent layer named "s" of the given shape (kheads 0: = heads).
LayerConfig SsmLayer(int heads, int kheads, int dk, int dv, int conv) {
  LayerConfig s;
  s.name = "s";
  s.kind = CacheKind::kSsm;
  s.heads = heads;
  s.kheads = kheads;
  s.dk = dk;
  s.dv = dv;
  s.conv = conv;
  return s;
}

// The `state` hash as docs/trace-runner.md defines it ("Where TRACE.md leaves room"):
// the floats taken two at a time as a little-endian 64-bit word, an odd
// last one zero-extended; h = 0xCBF29CE484222325, per word
// h = (h ^ w) * 0x9E3779B97F4A7C15, h ^= h >> 32; then mix(h ^ n).
uint64_t WordHashByDefinition(const std::vector<float>& floats) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < floats.size(); i += 2) {
    uint32_t lo = 0, hi = 0;
    std::memcpy(&lo, &floats[i], 4);
    if (i + 1 < floats.size()) std::memcpy(&hi, &floats[i + 1], 4);
    h = (h ^ (static_cast<uint64_t>(lo) | static_cast<uint64_t>(hi) << 32)) *
        0x9E3779B97F4A7C15ull;
    h ^= h >> 32;
  }
  return Mix(h ^ floats.size());
}

// A recurrent layer whose conv and recurrent states hold an odd number of
// floats (heads=1 dk=1 dv=1 conv=3: 2 x 3 conv floats and 1 state float):
// its `state` hash still follows the definition, the last float
// zero-extended into a word of its own.
TEST(TraceStateHash, OddNumberOfStateFloatsFollowsTheDefinition) {
  const LayerConfig s = SsmLayer(/*heads=*/1, /*kheads=*/0, /*dk=*/1, /*dv=*/1, /*conv=*/3);
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(1, {s}, &layout).ok());
  const size_t C = s.SsmChannels();
  ASSERT_EQ(C, 3u);
  const auto weights = Filled(C * 3, 0.25f), x = Filled(2 * C, 0.5f), gate = Filled(2, -1.0f),
             beta = Filled(2, 0.5f);
  SsmIO io;
  io.conv_weights = weights.data();
  io.x = x.data();
  io.gate = gate.data();
  io.beta = beta.data();
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(1, 2), {AttentionIO(io)}).ok());
  const SsmCacheBase* ssm = layout->recurrent(0);
  ASSERT_NE(ssm, nullptr);
  std::vector<float> floats = ssm->ConvStateTraceOrder(0);
  const std::vector<float> state = ssm->RecurrentStateTraceOrder(0);
  floats.insert(floats.end(), state.begin(), state.end());
  ASSERT_EQ(floats.size(), 7u);
  ASSERT_NE(floats.back(), 0.0f);  // the odd last float is not all zero bits
  EXPECT_EQ(trace::StateHash(*ssm, 0), WordHashByDefinition(floats));
  // The same through the runner's hasher fed in pieces (an odd piece first).
  trace::WordHasher pieces;
  pieces.Floats(floats.data(), 3);
  pieces.Floats(floats.data() + 3, 4);
  EXPECT_EQ(pieces.value(), WordHashByDefinition(floats));
}

}  // namespace
}  // namespace kvspec::trace
