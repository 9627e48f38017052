// Checks that mutation testing (tools/mutate) showed missing: each test pins
// a behaviour of core/ that no other test observed, found from a mutant
// that survived the whole harness. They test behaviour, not the mutants.
//
// Codec: damaged bytes are built by encoding a real cache and changing one
// field at an offset the test computes from the format (core/codec/codec.h) and
// checks before changing it, so a format change fails here loudly instead
// of testing something else.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kvspec/core/batch.h"
#include "kvspec/core/codec/codec.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/kernels/conv1d.h"
#include "kvspec/trace/program.h"
#include "kvspec/runner/runner.h"
#include "kvspec/runner/runner_internal.h"
#include "kvspec/trace/values.h"

namespace kvspec {
namespace {

template <class T>
T Get(const std::string& bytes, size_t at) {
  T v{};
  EXPECT_LE(at + sizeof(T), bytes.size());
  if (at + sizeof(T) <= bytes.size()) std::memcpy(&v, bytes.data() + at, sizeof(T));
  return v;
}

template <class T>
void Put(std::string* bytes, size_t at, T v) {
  ASSERT_LE(at + sizeof(T), bytes->size());
  std::memcpy(&(*bytes)[at], &v, sizeof(T));
}

std::vector<float> Filled(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// Offsets in an encoded column cache (kv, rotating and their batched kinds):
// "KVSC", u32 version, string kind, then i32 rows, heads, dim, window,
// capacity; i64 columns, peak, peak before the write; u64 slots, first;
// i64 held; then the vectors keys, values, slot positions, ...
struct ColumnOffsets {
  size_t rows, heads, dim, slots, keys;  // keys: the u64 count of the keys
  uint64_t elements;                     // keys (and values) per vector
  size_t values, slot_pos;               // their u64 counts
};

ColumnOffsets ColumnsOf(const std::string& bytes, const std::string& kind) {
  ColumnOffsets o{};
  const size_t payload = 4 + 4 + 4 + kind.size();
  EXPECT_EQ(Get<uint32_t>(bytes, 8), kind.size());
  EXPECT_EQ(bytes.substr(12, kind.size()), kind);
  o.rows = payload;
  o.heads = payload + 4;
  o.dim = payload + 8;
  o.slots = payload + 20 + 24;
  o.keys = o.slots + 8 + 8 + 8;
  o.elements = static_cast<uint64_t>(Get<int32_t>(bytes, o.rows)) *
               static_cast<uint64_t>(Get<int32_t>(bytes, o.heads)) *
               Get<uint64_t>(bytes, o.slots) *
               static_cast<uint64_t>(Get<int32_t>(bytes, o.dim));
  EXPECT_EQ(Get<uint64_t>(bytes, o.keys), o.elements);
  o.values = o.keys + 8 + 4 * o.elements;
  EXPECT_EQ(Get<uint64_t>(bytes, o.values), o.elements);
  o.slot_pos = o.values + 8 + 4 * o.elements;
  return o;
}

// A two-row batched kv cache, row 0 left-padded by one column.
std::string EncodedPaddedBatch(ColumnOffsets* offsets) {
  BatchedKvCache c(2, 1, 2);
  ForwardColumns cols = ForwardColumns::Dense(2, 3);
  cols.left = {1, 0};
  const auto k = Filled(2 * 3 * 2, 1.0f);
  EXPECT_TRUE(c.Append(cols, k.data(), k.data()).ok());
  std::string bytes;
  EXPECT_TRUE(EncodeCache(c, &bytes).ok());
  *offsets = ColumnsOf(bytes, "batched_kv");
  std::unique_ptr<Cache> back;
  EXPECT_TRUE(DecodeCache(bytes, &back).ok());  // the undamaged bytes decode
  return bytes;
}

// A vector whose count is not the one the geometry implies is refused, even
// when the bytes that follow are consistent with the count it claims.
TEST(CodecDamage, KeysOfTheWrongCountAreRefused) {
  ColumnOffsets o;
  const std::string bytes = EncodedPaddedBatch(&o);
  ASSERT_GT(o.elements, 1u);
  std::string shorter = bytes.substr(0, o.keys);
  const uint64_t fewer = o.elements - 1;
  shorter.append(reinterpret_cast<const char*>(&fewer), 8);
  shorter.append(bytes, o.keys + 8, 4 * fewer);  // drop the last key float
  shorter.append(bytes, o.values, std::string::npos);
  std::unique_ptr<Cache> out;
  const Status s = DecodeCache(shorter, &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("keys holds"), std::string::npos) << s.message();
  EXPECT_EQ(out, nullptr);
}

// A slot position is a position (>= 0) or -1 (padding or empty): -2 in a
// padding slot is refused like any other out-of-range value.
TEST(CodecDamage, SlotPositionBelowMinusOneIsRefused) {
  ColumnOffsets o;
  std::string bytes = EncodedPaddedBatch(&o);
  const uint64_t slots = Get<uint64_t>(bytes, o.slots);
  ASSERT_EQ(Get<uint64_t>(bytes, o.slot_pos), 2 * slots);
  const size_t row0_slot0 = o.slot_pos + 8;
  ASSERT_EQ(Get<int32_t>(bytes, row0_slot0), -1);  // row 0's left padding
  Put<int32_t>(&bytes, row0_slot0, -2);
  std::unique_ptr<Cache> out;
  const Status s = DecodeCache(bytes, &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("slot position -2"), std::string::npos) << s.message();
}

// The end of an encoded single-row ssm cache armed for a round (not yet
// verified): u8 armed, u8 verified, u64 1 + u8 snapshot, u64 1 + i32 round
// size, u64 0 (the row's record).
struct RoundTail {
  size_t armed, verified, real, record;
};

RoundTail RoundTailOf(const std::string& bytes) {
  RoundTail t{};
  t.record = bytes.size() - 8;
  t.real = t.record - 4;
  const size_t real_count = t.real - 8;
  const size_t snapshot_count = real_count - 1 - 8;
  t.verified = snapshot_count - 1;
  t.armed = t.verified - 1;
  EXPECT_EQ(Get<uint64_t>(bytes, t.record), 0u);
  EXPECT_EQ(Get<int32_t>(bytes, t.real), 0);
  EXPECT_EQ(Get<uint64_t>(bytes, real_count), 1u);
  EXPECT_EQ(Get<uint64_t>(bytes, snapshot_count), 1u);
  EXPECT_EQ(Get<uint8_t>(bytes, t.verified), 0);
  EXPECT_EQ(Get<uint8_t>(bytes, t.armed), 1);
  return t;
}

// A verified round's size per row lies in [0, next position]: a round of 0
// real tokens is a state the codec accepts, -1 is not.
TEST(CodecDamage, NegativeRoundSizeIsRefused) {
  SsmCache c(SsmShape{});
  ASSERT_TRUE(c.ArmRound().ok());
  std::string bytes;
  ASSERT_TRUE(EncodeCache(c, &bytes).ok());
  const RoundTail t = RoundTailOf(bytes);
  Put<uint8_t>(&bytes, t.verified, 1);
  std::unique_ptr<Cache> out;
  ASSERT_TRUE(DecodeCache(bytes, &out).ok());  // verified, 0 real tokens
  Put<int32_t>(&bytes, t.real, -1);
  out.reset();
  const Status s = DecodeCache(bytes, &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad round state"), std::string::npos) << s.message();
}

// ------------------------------------------------------------ layouts
// "KVSL", u32 version, i32 rows, u32 layers, then per layer: string name,
// i32 type, heads, q_heads, dim, window, capacity, kheads, dk, dv, conv,
// u64 length, the cache; then the layout state: vector bypass bounds, u8
// armed, u8 verified, vector verify sizes.

// Offset of the i32 config field `index` (0: type ... 9: conv) of layer 0.
size_t Layer0Field(const std::string& bytes, int index) {
  const size_t name = 16;
  return name + 4 + Get<uint32_t>(bytes, name) + 4 * static_cast<size_t>(index);
}

std::string EncodedLayout(int rows, std::vector<LayerConfig> configs,
                          std::unique_ptr<Layout>* keep = nullptr) {
  std::unique_ptr<Layout> layout;
  EXPECT_TRUE(Layout::Create(rows, std::move(configs), &layout).ok());
  std::string bytes;
  if (!layout) return bytes;
  EXPECT_TRUE(EncodeLayout(*layout, &bytes).ok());
  std::unique_ptr<Layout> back;
  EXPECT_TRUE(DecodeLayout(bytes, &back).ok());  // the undamaged bytes decode
  if (keep) *keep = std::move(layout);
  return bytes;
}

// A recurrent layer's configuration must describe its cache: a conv kernel
// size that differs from the cache's is refused.
TEST(CodecDamage, LayoutRefusesASsmConfigOfAnotherConvKernel) {
  LayerConfig ssm;
  ssm.name = "s";
  ssm.kind = CacheKind::kSsm;
  ssm.conv = 4;
  std::string bytes = EncodedLayout(1, {ssm});
  ASSERT_FALSE(bytes.empty());
  const size_t conv = Layer0Field(bytes, 9);
  ASSERT_EQ(Get<int32_t>(bytes, conv), 4);
  ASSERT_EQ(Get<int32_t>(bytes, Layer0Field(bytes, 0)), static_cast<int32_t>(CacheKind::kSsm));
  Put<int32_t>(&bytes, conv, 3);
  std::unique_ptr<Layout> out;
  const Status s = DecodeLayout(bytes, &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("does not match the layer's configuration"), std::string::npos)
      << s.message();
}

// A ring layer's configured window must be the ring's window, also when the
// configured capacity (set explicitly) still matches.
TEST(CodecDamage, LayoutRefusesARingConfigOfAnotherWindow) {
  LayerConfig ring;
  ring.name = "r";
  ring.kind = CacheKind::kRotating;
  ring.window = 4;
  ring.capacity = 8;
  std::string bytes = EncodedLayout(1, {ring});
  ASSERT_FALSE(bytes.empty());
  const size_t window = Layer0Field(bytes, 4);
  ASSERT_EQ(Get<int32_t>(bytes, window), 4);
  ASSERT_EQ(Get<int32_t>(bytes, Layer0Field(bytes, 5)), 8);
  Put<int32_t>(&bytes, window, 3);
  std::unique_ptr<Layout> out;
  const Status s = DecodeLayout(bytes, &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("does not match the layer's configuration"), std::string::npos)
      << s.message();
}

// ------------------------------------------------------------ field bounds
// Every bounded integer of the formats' headers (a layout's row and layer
// counts and each layer's config; a column cache's and a recurrent cache's
// geometry and counts), set one below its least and one above its greatest
// value, is refused at once by the codec with the exact message
// "bad encoding at byte E: NAME V outside [LO, HI]", E the offset just past
// the field; not later, by an invariant, with another message.
struct FieldBound {
  const char* name;
  size_t at;     // offset of the field
  int width;     // 4: int32 (or uint32 when lo >= 0 and unsigned_field), 8: int64
  bool unsigned_field;
  int64_t lo, hi;
};

template <class T>
std::string Written(std::string bytes, size_t at, int64_t v) {
  EXPECT_LE(at + sizeof(T), bytes.size());
  Put<T>(&bytes, at, static_cast<T>(v));
  return bytes;
}

std::string WithField(const std::string& bytes, const FieldBound& f, int64_t v) {
  if (f.width == 8) return f.unsigned_field ? Written<uint64_t>(bytes, f.at, v)
                                            : Written<int64_t>(bytes, f.at, v);
  return f.unsigned_field ? Written<uint32_t>(bytes, f.at, v) : Written<int32_t>(bytes, f.at, v);
}

std::string OutsideMessage(const FieldBound& f, int64_t v) {
  return "bad encoding at byte " + std::to_string(f.at + static_cast<size_t>(f.width)) + ": " +
         f.name + " " + std::to_string(v) + " outside [" + std::to_string(f.lo) + ", " +
         std::to_string(f.hi) + "]";
}

// Decodes `bytes` with each field of `fields` out of its bounds in turn.
template <class Decode>
void ExpectEveryBoundRefused(const std::string& what, const std::string& bytes,
                             const std::vector<FieldBound>& fields, Decode decode) {
  ASSERT_TRUE(decode(bytes).ok()) << what;
  for (const FieldBound& f : fields) {
    std::vector<int64_t> outside = {f.hi + 1};
    if (!(f.unsigned_field && f.lo == 0)) outside.push_back(f.lo - 1);
    for (int64_t v : outside) {
      const Status s = decode(WithField(bytes, f, v));
      EXPECT_FALSE(s.ok()) << what << " " << f.name << " " << v;
      EXPECT_EQ(s.message(), OutsideMessage(f, v)) << what << " " << f.name << " " << v;
    }
  }
}

Status DecodesAsLayout(const std::string& bytes) {
  std::unique_ptr<Layout> out;
  return DecodeLayout(bytes, &out);
}

Status DecodesAsCache(const std::string& bytes) {
  std::unique_ptr<Cache> out;
  return DecodeCache(bytes, &out);
}

TEST(CodecBounds, EveryLayoutFieldOutsideItsBoundsIsRefusedWithItsExactMessage) {
  LayerConfig ring;
  ring.name = "ring";
  ring.kind = CacheKind::kRotating;
  ring.window = 3;
  for (const LayerConfig& layer : {LayerConfig{}, ring}) {
    LayerConfig named = layer;
    if (named.name.empty()) named.name = "a";
    const std::string bytes = EncodedLayout(1, {named});
    ASSERT_FALSE(bytes.empty());
    const int64_t heads = 1 << 12, dims = 1 << 16, windows = int64_t{1} << 30;
    std::vector<FieldBound> fields = {{"rows", 8, 4, false, 1, 1 << 16},
                                      {"layers", 12, 4, true, 1, 1024}};
    const std::vector<std::tuple<const char*, int64_t, int64_t>> config = {
        {"layer type", 0, 2},   {"heads", 1, heads},     {"query heads", 0, heads},
        {"dim", 1, dims},       {"window", 0, windows},  {"capacity", 0, windows},
        {"key heads", 0, heads}, {"dk", 1, dims},        {"dv", 1, dims},
        {"conv", 1, static_cast<int64_t>(kMaxConvKernel)}};
    for (size_t i = 0; i < config.size(); ++i) {
      const auto& [name, lo, hi] = config[i];
      fields.push_back({name, Layer0Field(bytes, static_cast<int>(i)), 4, false, lo, hi});
    }
    ExpectEveryBoundRefused("layout of " + named.name, bytes, fields, DecodesAsLayout);
  }
}

TEST(CodecBounds, EveryCacheFieldOutsideItsBoundsIsRefusedWithItsExactMessage) {
  const int64_t heads = 1 << 12, dims = 1 << 16, windows = int64_t{1} << 30;
  const int64_t int32_max = std::numeric_limits<int32_t>::max();
  const auto x = Filled(2 * 3 * 2, 1.0f);
  // Column stores: the plain kind has no capacity, a ring one of at least
  // 1; a single-row kind exactly one row.
  KvCache kv(1, 2);
  RotatingCache ring(1, 2, 2, 3);
  BatchedKvCache batched(2, 1, 2);
  ASSERT_TRUE(kv.Append(ForwardColumns::Dense(1, 3), x.data(), x.data()).ok());
  ASSERT_TRUE(ring.Append(ForwardColumns::Dense(1, 3), x.data(), x.data()).ok());
  ASSERT_TRUE(batched.Append(ForwardColumns::Dense(2, 3), x.data(), x.data()).ok());
  const std::vector<std::tuple<const Cache*, int64_t, int64_t, int64_t>> stores = {
      {&kv, 1, 0, 0}, {&ring, 1, 1, windows}, {&batched, 1 << 16, 0, 0}};
  for (const auto& [cache, max_rows, min_capacity, max_capacity] : stores) {
    std::string bytes;
    ASSERT_TRUE(EncodeCache(*cache, &bytes).ok());
    const size_t at = 12 + cache->kind().size();
    ASSERT_EQ(Get<uint32_t>(bytes, 8), cache->kind().size());
    ExpectEveryBoundRefused(cache->kind(), bytes,
                            {{"rows", at, 4, false, 1, max_rows},
                             {"kv heads", at + 4, 4, false, 1, heads},
                             {"head dim", at + 8, 4, false, 1, dims},
                             {"window", at + 12, 4, false, 0, windows},
                             {"ring capacity", at + 16, 4, false, min_capacity, max_capacity},
                             {"columns", at + 20, 8, false, 0, int32_max},
                             {"peak", at + 28, 8, false, 0, int32_max},
                             {"slots", at + 44, 8, true, 0, windows}},
                            DecodesAsCache);
  }
  // Recurrent caches.
  SsmShape shape;
  shape.value_heads = 2;
  shape.key_heads = 1;
  shape.dk = 3;
  shape.dv = 2;
  shape.conv = 3;
  SsmCache ssm(shape);
  BatchedSsmCache batched_ssm(2, shape);
  for (const auto& [cache, max_rows] :
       std::vector<std::pair<const Cache*, int64_t>>{{&ssm, 1}, {&batched_ssm, 1 << 16}}) {
    std::string bytes;
    ASSERT_TRUE(EncodeCache(*cache, &bytes).ok());
    const size_t at = 12 + cache->kind().size();
    ASSERT_EQ(Get<uint32_t>(bytes, 8), cache->kind().size());
    ExpectEveryBoundRefused(cache->kind(), bytes,
                            {{"rows", at, 4, false, 1, max_rows},
                             {"value heads", at + 4, 4, false, 1, heads},
                             {"key heads", at + 8, 4, false, 1, heads},
                             {"dk", at + 12, 4, false, 1, dims},
                             {"dv", at + 16, 4, false, 1, dims},
                             {"conv kernel", at + 20, 4, false, 1,
                              static_cast<int64_t>(kMaxConvKernel)}},
                            DecodesAsCache);
  }
}

// The encoding of a one-row layout of one default kv layer "a" after a
// window of `tokens` tokens.
void EncodeOneKvLayer(int32_t tokens, std::string* bytes) {
  LayerConfig kv;
  kv.name = "a";
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(1, {kv}, &layout).ok());
  const auto x = Filled(static_cast<size_t>(tokens) * 4, 0.5f);
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(1, tokens),
                              {AttentionIO(x.data(), x.data(), x.data(), nullptr)})
                  .ok());
  ASSERT_TRUE(EncodeLayout(*layout, bytes).ok());
}

// A layer's cache that does not decode is refused with its own reason
// (here an unknown kind), named by layer, not as trailing bytes.
TEST(CodecDamage, ALayerCacheThatDoesNotDecodeIsRefusedForItsReason) {
  std::string bytes;
  ASSERT_NO_FATAL_FAILURE(EncodeOneKvLayer(2, &bytes));
  const size_t cache = bytes.find("KVSC");
  ASSERT_NE(cache, std::string::npos);
  const uint32_t length = Get<uint32_t>(bytes, cache + 8);
  const std::string kind = bytes.substr(cache + 12, length);
  ASSERT_TRUE(HasCodec(kind)) << kind;
  bytes[cache + 12] = 'Q';  // an unknown kind of the same length
  std::unique_ptr<Layout> back;
  const Status s = DecodeLayout(bytes, &back);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("layer 0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("no codec for cache kind 'Q" + kind.substr(1) + "'"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().find("trailing bytes"), std::string::npos) << s.message();
}

// The bypass-trim bound of a row lies in [0, its next position]: a negative
// bound is refused.
TEST(CodecDamage, LayoutRefusesANegativeBypassBound) {
  std::string bytes;
  ASSERT_NO_FATAL_FAILURE(EncodeOneKvLayer(3, &bytes));
  // Tail: u64 1, i32 bound; u8 armed, u8 verified; u64 0 (verify sizes).
  const size_t n = bytes.size();
  ASSERT_EQ(Get<uint64_t>(bytes, n - 8), 0u);
  ASSERT_EQ(Get<uint8_t>(bytes, n - 9), 0);
  ASSERT_EQ(Get<uint8_t>(bytes, n - 10), 0);
  ASSERT_EQ(Get<int32_t>(bytes, n - 14), 3);  // the window's real tokens
  ASSERT_EQ(Get<uint64_t>(bytes, n - 22), 1u);
  std::unique_ptr<Layout> out;
  Put<int32_t>(&bytes, n - 14, 0);
  ASSERT_TRUE(DecodeLayout(bytes, &out).ok());  // 0 is a bound
  Put<int32_t>(&bytes, n - 14, -1);
  out.reset();
  const Status s = DecodeLayout(bytes, &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad layout round state for row 0"), std::string::npos)
      << s.message();
}

// ------------------------------------------------------------ tip drops
// Dropping the tips of the last write leaves the cache as if only the
// accepted tokens had been written, peak (the wrap bookkeeping) included,
// also when trims before that write had lowered the columns below the peak.
TEST(TipDrops, PeakIsAsIfOnlyTheAcceptedTokensWereWritten) {
  const auto x = Filled(6 * 2, 1.0f);
  KvCache a(1, 2), b(1, 2);
  for (KvCache* c : {&a, &b}) {
    ASSERT_TRUE(c->Append(ForwardColumns::Dense(1, 6), x.data(), x.data()).ok());
    ASSERT_TRUE(c->trim(1).ok());  // right after the write: peak 5
    ASSERT_TRUE(c->trim(2).ok());  // 3 columns held, peak still 5
  }
  ASSERT_TRUE(a.Append(ForwardColumns::Dense(1, 2), x.data(), x.data()).ok());
  ASSERT_TRUE(a.trim(1, /*bypass=*/true).ok());
  ASSERT_TRUE(b.Append(ForwardColumns::Dense(1, 1), x.data(), x.data()).ok());
  EXPECT_EQ(a.columns(), b.columns());
  EXPECT_EQ(b.peak(), 5);
  EXPECT_EQ(a.peak(), b.peak());
}

// A bypass trim drops at most the real tokens of the last window of every
// row: one more is refused by the cache itself (not only by a layout).
TEST(TipDrops, BypassTrimBeyondTheLastWindowIsRefused) {
  const auto x = Filled(4 * 2, 1.0f);
  KvCache c(1, 2);
  ASSERT_TRUE(c.Append(ForwardColumns::Dense(1, 4), x.data(), x.data()).ok());
  ASSERT_TRUE(c.Append(ForwardColumns::Dense(1, 2), x.data(), x.data()).ok());
  const Status s = c.trim(3, /*bypass=*/true);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("wrote only 2 real tokens"), std::string::npos) << s.message();
  EXPECT_EQ(c.columns(), 6);
  EXPECT_TRUE(c.trim(2, /*bypass=*/true).ok());
  EXPECT_EQ(c.columns(), 4);
}

// ------------------------------------------------------------ layouts
TEST(LayoutCreate, RingCapacityBelowTheWindowIsRefused) {
  LayerConfig ring;
  ring.name = "r";
  ring.kind = CacheKind::kRotating;
  ring.window = 4;
  ring.capacity = 3;
  std::unique_ptr<Layout> layout;
  const Status s = Layout::Create(1, {ring}, &layout);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad ring shape"), std::string::npos) << s.message();
  EXPECT_EQ(layout, nullptr);
  ring.capacity = 4;
  EXPECT_TRUE(Layout::Create(1, {ring}, &layout).ok());
}

// Masks point into the caches: a copy has no last mask until its own first
// forward, whatever the original had.
TEST(LayoutCopy, ACopyHasNoLastMask) {
  LayerConfig kv;
  kv.name = "a";
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(1, {kv, kv}, &layout).ok());
  const auto x = Filled(3 * 4, 0.5f);
  const AttentionIO io(x.data(), x.data(), x.data(), nullptr);
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(1, 3), {io, io}).ok());
  ASSERT_NE(layout->LastMask(0), nullptr);
  const std::unique_ptr<Layout> copy = layout->Copy();
  EXPECT_EQ(copy->LastMask(0), nullptr);
  EXPECT_EQ(copy->LastMask(1), nullptr);
  ASSERT_TRUE(copy->Forward(ForwardColumns::Dense(1, 1, true), {io, io}).ok());
  ASSERT_NE(copy->LastMask(1), nullptr);
  EXPECT_EQ(copy->LastMask(1)->queries, 1);
}

// Every layout that an operation makes anew (created, copied, extracted,
// decoded) and every one that a filter or join changed reads no mask until
// its own first forward, and holds its invariants (Layout invariant 5: a
// layer reads no mask, or one that exists), also in a build without the
// invariant checks after each operation.
TEST(LayoutMasks, EveryNewOrChangedLayoutReadsNoMask) {
  LayerConfig kv, ring;
  kv.name = "a";
  ring.name = "r";
  ring.kind = CacheKind::kRotating;
  ring.window = 2;
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(2, {kv, ring}, &layout).ok());
  auto reads_no_mask = [](const Layout& l, const char* what) {
    EXPECT_TRUE(l.CheckInvariants().ok()) << what << ": " << l.CheckInvariants().message();
    for (size_t i = 0; i < l.size(); ++i) EXPECT_EQ(l.LastMask(i), nullptr) << what << " " << i;
  };
  reads_no_mask(*layout, "created");
  const auto x = Filled(2 * 3 * 4, 0.5f);
  const AttentionIO io(x.data(), x.data(), x.data(), nullptr);
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(2, 3), {io, io}).ok());
  ASSERT_NE(layout->LastMask(0), nullptr);
  ASSERT_NE(layout->LastMask(1), nullptr);
  reads_no_mask(*layout->Copy(), "copied");
  std::unique_ptr<Layout> one;
  ASSERT_TRUE(layout->Extract(1, &one).ok());
  reads_no_mask(*one, "extracted");
  std::string bytes;
  ASSERT_TRUE(EncodeLayout(*layout, &bytes).ok());
  std::unique_ptr<Layout> decoded;
  ASSERT_TRUE(DecodeLayout(bytes, &decoded).ok());
  reads_no_mask(*decoded, "decoded");
  const std::unique_ptr<Layout> other = layout->Copy();
  ASSERT_TRUE(layout->Join(*other).ok());
  reads_no_mask(*layout, "joined");
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(4, 1), {io, io}).ok());
  ASSERT_NE(layout->LastMask(1), nullptr);
  ASSERT_TRUE(layout->Filter({0, 3}).ok());
  reads_no_mask(*layout, "filtered");
  // Each reads its own mask after its own forward.
  ASSERT_TRUE(one->Forward(ForwardColumns::Dense(1, 1), {io, io}).ok());
  ASSERT_NE(one->LastMask(1), nullptr);
  EXPECT_EQ(one->LastMask(1)->rows, 1);
  EXPECT_TRUE(one->CheckInvariants().ok());
}

// An accept count below 0 is refused by the layout, naming the count, before
// any layer is asked to drop or roll back anything.
TEST(LayoutRounds, NegativeAcceptIsRefusedByTheLayout) {
  LayerConfig kv;
  kv.name = "a";
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(1, {kv}, &layout).ok());
  const auto x = Filled(3 * 4, 0.5f);
  const AttentionIO io(x.data(), x.data(), x.data(), nullptr);
  ASSERT_TRUE(layout->Arm().ok());
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(1, 3), {io}).ok());
  const uint64_t before = layout->StateHash();
  const Status s = layout->Accept({-1});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("accept -1: row 0 has 3 real tokens"), std::string::npos)
      << s.message();
  EXPECT_EQ(layout->StateHash(), before);
  EXPECT_TRUE(layout->Accept({3}).ok());
}

// A bypass trim is valid only right after a window (TRACE.md, precise rule
// 3): after a decode the layout holds no bypass bound at all. Its persisted
// state is the same as after forgetting the bound (what a trace's reload
// does), and a bypass trim, of any count, is refused by the layout itself,
// before any layer is asked (the message names no layer), changing
// nothing. A window after the decode makes it valid again.
TEST(LayoutTrims, BypassTrimRightAfterADecodeIsRefusedByTheLayout) {
  LayerConfig kv, ring;
  kv.name = "a";
  ring.name = "r";
  ring.kind = CacheKind::kRotating;
  ring.window = 2;
  ring.capacity = 4;
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(2, {kv, ring}, &layout).ok());
  const auto x = Filled(2 * 3 * 4, 0.5f);
  const AttentionIO io(x.data(), x.data(), x.data(), nullptr);
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(2, 3), {io, io}).ok());
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(2, 1, /*decode=*/true), {io, io}).ok());
  std::string encoded, forgotten;
  ASSERT_TRUE(EncodeLayout(*layout, &encoded).ok());
  std::unique_ptr<Layout> reloaded = layout->Copy();
  reloaded->ForgetBypassBound();
  ASSERT_TRUE(EncodeLayout(*reloaded, &forgotten).ok());
  EXPECT_TRUE(encoded == forgotten) << "a decode left a bypass bound in the encoded layout";
  const uint64_t before = layout->StateHash();
  for (int32_t n : {0, 1}) {
    const Status s = layout->Trim(n, /*bypass=*/true);
    EXPECT_FALSE(s.ok()) << "trim " << n << " bypass after a decode";
    EXPECT_EQ(s.message(), "trim bypass is only valid right after a window");
    EXPECT_EQ(layout->StateHash(), before);
  }
  EXPECT_EQ(layout->positions(), (std::vector<int32_t>{4, 4}));
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(2, 2), {io, io}).ok());
  EXPECT_TRUE(layout->Trim(1, /*bypass=*/true).ok());
  EXPECT_EQ(layout->positions(), (std::vector<int32_t>{5, 5}));
}

// A filter, a join and an extract change the rows, and what a bypass trim
// may take is a bound per row of the last window: each leaves no bypass
// bound (its encoding equals the one with the bound forgotten), and the
// layout itself refuses a bypass trim after it, with its own message,
// changing nothing (the caches would refuse it too, with another message).
TEST(LayoutTrims, RowChangesLeaveNoBypassBound) {
  LayerConfig kv;
  kv.name = "a";
  const auto x = Filled(2 * 3 * 4, 0.5f);
  const AttentionIO io(x.data(), x.data(), x.data(), nullptr);
  const auto windowed = [&]() {
    std::unique_ptr<Layout> layout;
    EXPECT_TRUE(Layout::Create(2, {kv}, &layout).ok());
    EXPECT_TRUE(layout->Forward(ForwardColumns::Dense(2, 3), {io}).ok());
    return layout;
  };
  const auto check = [](Layout& layout, const char* after) {
    std::string encoded, forgotten;
    ASSERT_TRUE(EncodeLayout(layout, &encoded).ok()) << after;
    std::unique_ptr<Layout> copy = layout.Copy();
    copy->ForgetBypassBound();
    ASSERT_TRUE(EncodeLayout(*copy, &forgotten).ok()) << after;
    EXPECT_TRUE(encoded == forgotten) << after << " left a bypass bound";
    const uint64_t before = layout.StateHash();
    const Status s = layout.Trim(1, /*bypass=*/true);
    EXPECT_FALSE(s.ok()) << "trim 1 bypass after " << after;
    EXPECT_EQ(s.message(), "trim bypass is only valid right after a window") << after;
    EXPECT_EQ(layout.StateHash(), before) << after;
  };
  {
    std::unique_ptr<Layout> layout = windowed();
    ASSERT_TRUE(layout->Filter({1}).ok());
    check(*layout, "a filter");
  }
  {
    std::unique_ptr<Layout> layout = windowed(), other = windowed();
    ASSERT_TRUE(layout->Join(*other).ok());
    check(*layout, "a join");
  }
  {
    std::unique_ptr<Layout> layout = windowed(), row;
    ASSERT_TRUE(layout->Extract(0, &row).ok());
    check(*row, "an extract");
  }
  // Right after a window the bound is there, and the same trim is taken.
  std::unique_ptr<Layout> layout = windowed();
  EXPECT_TRUE(layout->Trim(1, /*bypass=*/true).ok());
  EXPECT_EQ(layout->positions(), (std::vector<int32_t>{2, 2}));
}

// Layouts join only with the same layer list: a layer of another head dim
// is named as the difference.
TEST(LayoutJoin, ALayerOfAnotherDimIsRefusedByName) {
  LayerConfig kv;
  kv.name = "a";
  kv.dim = 4;
  LayerConfig wide = kv;
  wide.dim = 8;
  std::unique_ptr<Layout> a, b;
  ASSERT_TRUE(Layout::Create(1, {kv}, &a).ok());
  ASSERT_TRUE(Layout::Create(1, {wide}, &b).ok());
  const Status s = a->Join(*b);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("join needs the same layer list"), std::string::npos)
      << s.message();
  EXPECT_EQ(a->rows(), 1);
}

// Layouts join only with the same layer list, every field of every layer
// included: a layout whose one layer differs from ours in a single field
// (a ring of another capacity, an ssm layer of another conv size, ...) is
// refused by the layout, naming the layer, and nothing changes.
TEST(LayoutJoin, EveryFieldOfEveryLayerMustMatch) {
  LayerConfig ring;
  ring.name = "r";
  ring.kind = CacheKind::kRotating;
  ring.heads = 1;
  ring.q_heads = 2;
  ring.window = 4;
  ring.capacity = 6;
  LayerConfig ssm;
  ssm.name = "s";
  ssm.kind = CacheKind::kSsm;
  ssm.heads = 2;
  ssm.kheads = 1;
  struct Change {
    const char* field;
    int layer;  // 0: the ring, 1: the ssm layer
    void (*apply)(LayerConfig*);
  };
  const Change changes[] = {
      {"name", 0, [](LayerConfig* c) { c->name = "q"; }},
      {"q_heads", 0, [](LayerConfig* c) { c->q_heads = 1; }},
      {"dim", 0, [](LayerConfig* c) { c->dim = 8; }},
      {"window", 0, [](LayerConfig* c) { c->window = 5; }},
      {"capacity", 0, [](LayerConfig* c) { c->capacity = 7; }},
      {"kheads", 1, [](LayerConfig* c) { c->kheads = 2; }},
      {"dk", 1, [](LayerConfig* c) { c->dk = 8; }},
      {"dv", 1, [](LayerConfig* c) { c->dv = 8; }},
      {"conv", 1, [](LayerConfig* c) { c->conv = 3; }},
  };
  std::unique_ptr<Layout> same;
  ASSERT_TRUE(Layout::Create(1, {ring, ssm}, &same).ok());
  for (const Change& change : changes) {
    std::vector<LayerConfig> other_layers = {ring, ssm};
    change.apply(&other_layers[static_cast<size_t>(change.layer)]);
    std::unique_ptr<Layout> a, b;
    ASSERT_TRUE(Layout::Create(1, {ring, ssm}, &a).ok()) << change.field;
    ASSERT_TRUE(Layout::Create(1, other_layers, &b).ok()) << change.field;
    const uint64_t before = a->StateHash();
    const Status s = a->Join(*b);
    EXPECT_FALSE(s.ok()) << change.field;
    EXPECT_NE(s.message().find("join needs the same layer list"), std::string::npos)
        << change.field << ": " << s.message();
    EXPECT_EQ(a->rows(), 1) << change.field;
    EXPECT_EQ(a->StateHash(), before) << change.field;
  }
  // and the same layer list joins
  std::unique_ptr<Layout> a;
  ASSERT_TRUE(Layout::Create(1, {ring, ssm}, &a).ok());
  ASSERT_TRUE(a->Join(*same).ok());
  EXPECT_EQ(a->rows(), 2);
}

// ------------------------------------------------------------ ssm gates
uint64_t HashOf(const Cache& c) {
  Hasher h;
  c.HashState(&h);
  return h.value();
}

// Runs two tokens through a one-head ssm cache (dk = dv = 4) with the given
// gates ([2][Hv] or [2][Hv][dk]) and returns the state hash.
uint64_t StateAfterTwoTokens(bool per_lane, const std::vector<float>& gate) {
  SsmShape shape;
  shape.dk = 4;
  shape.dv = 4;
  shape.conv = 2;
  shape.gate_per_lane = per_lane;
  SsmCache c(shape);
  const size_t C = shape.Channels();
  std::vector<float> w(2 * C), x(2 * C), beta(2, 0.5f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f + 0.01f * static_cast<float>(i % 7);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.3f - 0.05f * static_cast<float>(i % 5);
  SsmIO io;
  io.conv_weights = w.data();
  io.x = x.data();
  io.gate = gate.data();
  io.beta = beta.data();
  EXPECT_TRUE(c.Forward(ForwardColumns::Dense(1, 2), io).ok());
  return HashOf(c);
}

// Per-lane gates decay each key lane of the state by its own gate: changing
// the gate of any lane, not only the first, changes the state.
TEST(SsmGates, EveryLaneGateCounts) {
  const std::vector<float> equal = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  const uint64_t base = StateAfterTwoTokens(true, equal);
  EXPECT_EQ(base, StateAfterTwoTokens(true, equal));
  for (size_t lane = 1; lane < 4; ++lane) {
    std::vector<float> g = equal;
    g[4 + lane] = 0.9f;  // the second token's gate of one lane
    EXPECT_NE(StateAfterTwoTokens(true, g), base) << "lane " << lane;
  }
  // Per head, the one gate of the head counts the same way.
  EXPECT_NE(StateAfterTwoTokens(false, {0.5f, 0.5f}), StateAfterTwoTokens(false, {0.5f, 0.9f}));
}

// ------------------------------------------------------------ parser
// The parser reads only the bytes of the view it is given: a view that ends
// in blanks without a newline, inside a larger buffer that goes on with
// more blanks and a word, parses as the view alone.
TEST(TraceParseView, ReadsOnlyTheBytesOfItsView) {
  const std::string buffer = "trace 1\nrows 1\nlayer a kv \t   x";
  const std::string_view text(buffer.data(), buffer.size() - 4);  // ends with " \t"
  ASSERT_EQ(text.substr(text.size() - 2), " \t");
  trace::Program program;
  trace::SyntaxError error;
  ASSERT_TRUE(trace::ParseTrace(text, "view.trace", &program, &error)) << error.ToString();
  ASSERT_EQ(program.layers.size(), 1u);
  ASSERT_EQ(program.lines.size(), 3u);
  EXPECT_EQ(program.lines[2], "layer a kv \t");
}

// `decode` takes ids= only: right= (prepared padding) belongs to windows.
TEST(TraceParseView, DecodeRefusesRightPadding) {
  const std::string head = "trace 1\nrows 1\nlayer a kv\n";
  trace::Program program;
  trace::SyntaxError error;
  EXPECT_FALSE(trace::ParseTrace(head + "decode right=0\n", "t.trace", &program, &error));
  EXPECT_EQ(error.line, 4);
  EXPECT_EQ(error.col, 8);
  EXPECT_EQ(error.message, "decode: unknown option 'right' (expected ids=)");
  trace::Program window;
  EXPECT_TRUE(trace::ParseTrace(head + "window 2 right=0\n", "t.trace", &window, &error))
      << error.ToString();
}

// ------------------------------------------------------------ runner
// A trace that needs more storage than the budget stops like a limit
// violation: exit status 2, not 1 (the status of a refusal or a failed
// expectation), with the statement's line.
TEST(TraceRunnerLimits, StorageBudgetExceededExitsTwo) {
  // 16 KiB per column: the second window needs more than 1 MiB.
  const std::string text =
      "trace 1\nrows 1\nlayer a kv heads=8 dim=256\nwindow 2\nwindow 80\n";
  trace::RunOptions options;
  options.max_bytes = size_t{1} << 20;
  std::ostringstream out, err;
  EXPECT_EQ(trace::RunTraceText(text, "budget.trace", options, out, err), 2);
  EXPECT_NE(err.str().find("budget.trace:5:"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("limit: the forward needs "), std::string::npos) << err.str();
  EXPECT_NE(err.str().find(" MiB (budget 1 MiB"), std::string::npos)
      << err.str();
  std::ostringstream out2, err2;
  options.max_bytes = size_t{16} << 20;
  EXPECT_EQ(trace::RunTraceText(text, "budget.trace", options, out2, err2), 0) << err2.str();
}

// The smallest limit in [lo, hi] with which `text` runs to its end (exit 0)
// when `set(options, limit)` applies it; one less stops it. The runner
// passes for every limit from that one up, so a bisection finds it.
template <class Set>
uint64_t SmallestPassingLimit(const std::string& text, uint64_t lo, uint64_t hi, Set set) {
  while (lo < hi) {  // runs with hi, not with lo - 1
    const uint64_t mid = lo + (hi - lo) / 2;
    trace::RunOptions options;
    set(&options, mid);
    std::ostringstream out, err;
    if (trace::RunTraceText(text, "limit.trace", options, out, err) == 0) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

size_t SmallestBudget(const std::string& text) {
  return static_cast<size_t>(SmallestPassingLimit(
      text, 1, uint64_t{64} << 20,
      [](trace::RunOptions* o, uint64_t limit) { o->max_bytes = static_cast<size_t>(limit); }));
}

// A reload holds the layout, its encoding and its decoded copy at once: the
// smallest budget that lets a trace reload exceeds the smallest one that
// runs it without the reload by more than half the layout's storage, and
// one byte less stops it at the reload, naming it.
TEST(TraceRunnerLimits, ReloadNeedsRoomForTwoCopies) {
  // Wide tokens (64 heads x dim 512: 256 KiB each), so that the layout's
  // storage, not one forward's read-back, decides the smallest budget.
  LayerConfig kv;
  kv.name = "a";
  kv.heads = 64;
  kv.dim = 512;
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(1, {kv}, &layout).ok());
  const auto x = Filled(8 * 64 * 512, 0.5f);
  ASSERT_TRUE(layout->Forward(ForwardColumns::Dense(1, 8),
                              {AttentionIO(x.data(), x.data(), x.data(), nullptr)})
                  .ok());
  const std::string prefix = "trace 1\nrows 1\nlayer a kv heads=64 dim=512\nwindow 8\n";
  const size_t held = layout->allocatedBytes();
  ASSERT_GT(held, 0u);
  const size_t without = SmallestBudget(prefix);
  const size_t with = SmallestBudget(prefix + "reload\n");
  EXPECT_GT(with, without + held / 2);  // the decoded copy is budgeted
  trace::RunOptions options;
  options.max_bytes = with - 1;
  std::ostringstream out, err;
  EXPECT_EQ(trace::RunTraceText(prefix + "reload\n", "reload.trace", options, out, err), 2);
  EXPECT_NE(err.str().find("reload.trace:5: limit: reload needs"), std::string::npos)
      << err.str();
}

// The runner holds the tags each query saw in the last forward only for a
// trace that reads them (`expect sees`): the smallest budget that runs a
// trace with an `expect sees` exceeds the one of the same trace without it,
// by at least those tags (one per seen pair of the window's 32 queries).
// Copies made after the forward (forks) decide both budgets, not the
// forward's own read-back.
TEST(TraceRunnerLimits, SeenTagsAreHeldOnlyForATraceThatReadsThem) {
  const std::string window = "trace 1\nrows 1\nlayer a kv heads=8 dim=256\nwindow 32\n";
  const std::string forks = "fork b\nfork c\nfork d\n";
  const size_t without = SmallestBudget(window + forks);
  const size_t with = SmallestBudget(window + "expect sees a r0 p0: 0\n" + forks);
  const size_t pairs = 32 * 33 / 2;
  EXPECT_GE(with, without + pairs * sizeof(trace::Tag)) << "without " << without;
  // The forks decide: one fork less needs less in both.
  EXPECT_LT(SmallestBudget(window + "fork b\nfork c\n"), without);
}

// The smallest work budget (RunOptions::max_work, in operations) that runs
// `text` to its end: one operation less stops it with a work limit.
uint64_t SmallestWork(const std::string& text, bool values) {
  return SmallestPassingLimit(text, 0, uint64_t{1} << 40,
                              [values](trace::RunOptions* o, uint64_t limit) {
                                o->max_work = limit;
                                o->values = values;
                              });
}

// A forward's work, as README defines it, per attention layer: per seen
// (query, slot) pair 2 x Hq x D multiply-adds when outputs are observed
// (--values) and 64 for its reported tag; per real token a scan of the
// mask over the slots after the append; and the bytes of those slots
// (K and V: 2 x H x D floats, and a position each). A plain cache grows to
// max(needed, 1.5 x slots, 16) slots (core/kv_cache.h). The budget is the
// sum over the trace's forwards, exactly: nothing else counts.
TEST(TraceRunnerLimits, WorkBudgetIsTheSumOfTheForwardsWork) {
  const std::string text = "trace 1\nrows 1\nlayer a kv heads=2 qheads=4 dim=8\nwindow 4\nwindow 2\n";
  const uint64_t slot_bytes = 2 * 2 * 8 * sizeof(float) + sizeof(int32_t);  // 132
  const uint64_t slots = 16;  // 4, then 6 tokens: 16 slots both times
  const uint64_t pairs1 = 1 + 2 + 3 + 4, pairs2 = 5 + 6;
  const uint64_t plain = (4 * slots + slots * slot_bytes + pairs1 * 64) +
                         (2 * slots + slots * slot_bytes + pairs2 * 64);
  EXPECT_EQ(plain, 5664u);
  EXPECT_EQ(SmallestWork(text, false), plain);
  EXPECT_EQ(SmallestWork(text, true), plain + (pairs1 + pairs2) * 2 * 4 * 8);
  // A window of its own: the first forward alone.
  EXPECT_EQ(SmallestWork("trace 1\nrows 1\nlayer a kv heads=2 qheads=4 dim=8\nwindow 4\n", false),
            4 * slots + slots * slot_bytes + pairs1 * 64);
}

// A recurrent forward's work (the "recurrent steps" of README), per real
// token of a row: 4 multiply-adds per recurrent state element (Hv x dv x
// dk: its decay, the k.S read, the update and the q.S output) and one per
// conv weight (C x K, C = 2 x Hk x dk + Hv x dv channels); pad columns
// cost nothing, and outputs are always computed, with or without --values.
// Here Hv = 2, Hk = 1, dk = 4, dv = 3, K = 4: C = 14, 4 x 24 + 14 x 4 = 152
// per token, over 3 + 2 tokens (a right pad in row 1) and a decode of 2.
TEST(TraceRunnerLimits, RecurrentWorkIsItsStepsPerRealToken) {
  const std::string header =
      "trace 1\nrows 2\nlayer s ssm heads=2 kheads=1 dk=4 dv=3 conv=4\nwindow 3 right=0,1\n";
  const uint64_t channels = 2 * 1 * 4 + 2 * 3;
  const uint64_t per_token = 4 * 2 * 3 * 4 + channels * 4;
  ASSERT_EQ(per_token, 152u);
  EXPECT_EQ(SmallestWork(header, false), 5 * per_token);
  EXPECT_EQ(SmallestWork(header + "decode\n", false), 7 * per_token);
  EXPECT_EQ(SmallestWork(header + "decode\n", true), 7 * per_token);
}

// What creating the layers costs (README: a recurrent layer double-buffers
// every row's state, conv [K-1][C] and S [Hv][dv][dk] floats; a ring
// allocates its capacity of slots, K and V of H x D floats and a position
// each; a kv layer starts empty), summed over the layers in header order:
// the smallest memory budget of a trace of layers only is exactly that sum,
// and one byte less stops it at the layer that crosses it, naming it.
TEST(TraceRunnerLimits, CreatingTheLayersCostsTheirStorageExactly) {
  const std::string header =
      "trace 1\nrows 2\nlayer s ssm heads=2 kheads=1 dk=4 dv=3 conv=4\nlayer k kv heads=3 dim=8\n"
      "layer r rotating window=3 capacity=5 heads=2 dim=4\n";
  const uint64_t channels = 2 * 1 * 4 + 2 * 3;
  const uint64_t ssm = 2 * 2 * ((4 - 1) * channels + 2 * 3 * 4) * sizeof(float);
  const uint64_t ring = 2 * 5 * (2 * 2 * 4 * sizeof(float) + sizeof(int32_t));
  ASSERT_EQ(ssm, 1056u);
  ASSERT_EQ(ring, 680u);
  EXPECT_EQ(SmallestBudget(header), ssm + ring);
  const std::vector<std::pair<size_t, std::string>> short_of = {
      {ssm + ring - 1, "t.trace:5: limit: the layers up to 'r' needs 1 MiB (budget 1 MiB, --max-memory)\n"},
      {ssm - 1, "t.trace:3: limit: the layers up to 's' needs 1 MiB (budget 1 MiB, --max-memory)\n"},
      {0, "t.trace:3: limit: the layers up to 's' needs 1 MiB (budget 0 MiB, --max-memory)\n"}};
  for (const auto& [budget, want] : short_of) {
    trace::RunOptions options;
    options.max_bytes = budget;
    std::ostringstream out, err;
    EXPECT_EQ(trace::RunTraceText(header, "t.trace", options, out, err), 2) << budget;
    EXPECT_EQ(err.str(), want) << budget;
  }
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

// A recurrent forward's memory, exactly (README: the layout's storage and
// the storage it grows to, held at once; the inputs x [C], gate and beta
// [Hv] and outputs y [Hv x dv] of every column, pads included; the
// read-back of each real token's outputs, a float and its 16-byte text
// each; and, in an armed round, the round records of the real tokens: per
// token C + 2 Hk dk + Hv dv + Hv dk + Hv floats). Hv = 2, Hk = 1, dk = 4,
// dv = 3, K = 4 (C = 14), 2 rows, a window of 3 columns with 3 + 2 real
// tokens.
TEST(TraceRunnerLimits, ARecurrentForwardCostsItsStateInputsOutputsAndRecords) {
  const LayerConfig s = SsmLayer(/*heads=*/2, /*kheads=*/1, /*dk=*/4, /*dv=*/3, /*conv=*/4);
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(Layout::Create(2, {s}, &layout).ok());
  const uint64_t held = layout->allocatedBytes();
  ASSERT_EQ(layout->BytesAfterForward(3), held);  // a recurrent state does not grow
  const std::string header =
      "trace 1\nrows 2\nlayer s ssm heads=2 kheads=1 dk=4 dv=3 conv=4\n";
  const uint64_t io = 2 * 3 * (14 + 2 + 2 + 2 * 3) * sizeof(float);
  const uint64_t read_back = 5 * 2 * 3 * (sizeof(float) + 16);
  const uint64_t records = 5 * (14 + 2 * 4 + 2 * 3 + 2 * 4 + 2) * sizeof(float);
  EXPECT_EQ(SmallestBudget(header + "window 3 right=0,1\n"), 2 * held + io + read_back);
  ASSERT_TRUE(layout->Arm().ok());
  ASSERT_EQ(layout->allocatedBytes(), held);
  EXPECT_EQ(SmallestBudget(header + "arm\nwindow 3 right=0,1\n"),
            2 * held + io + read_back + records);
}

// The same for an attention forward: the storage it grows to (a plain
// cache of 1 head of dim 4 grows to 16 slots of K, V and a position), its
// inputs k and v (and q and o when outputs are observed: Hq = 2), the
// read-back (per seen pair a Tag and its 24-byte text; per query, when
// observed, its Hq x D outputs, a float and its 16-byte text each) and the
// content index's 64 bytes per new token. One window of 3 tokens: 6 pairs.
TEST(TraceRunnerLimits, AnAttentionForwardCostsItsStorageInputsReadBackAndIndex) {
  const std::string text = "trace 1\nrows 1\nlayer a kv heads=1 qheads=2 dim=4\nwindow 3\n";
  const uint64_t storage = 16 * (2 * 4 * sizeof(float) + sizeof(int32_t));
  const uint64_t pairs = 1 + 2 + 3, index = 3 * 64;
  const uint64_t tags = pairs * (sizeof(trace::Tag) + 24);
  const uint64_t appended = 2 * 3 * 1 * 4 * sizeof(float);  // k and v
  const uint64_t observed = 2 * 3 * 2 * 4 * sizeof(float) + 3 * 2 * 4 * (sizeof(float) + 16);
  const auto smallest = [&](bool values) {
    return SmallestPassingLimit(text, 1, uint64_t{1} << 24,
                                [values](trace::RunOptions* o, uint64_t limit) {
                                  o->max_bytes = static_cast<size_t>(limit);
                                  o->values = values;
                                });
  };
  EXPECT_EQ(smallest(false), storage + appended + tags + index);
  EXPECT_EQ(smallest(true), storage + appended + observed + tags + index);
}

// The work limit names the work in whole millions, rounded down: a trace
// whose work is 5,999,996 operations (by the figures above: 422 tokens of
// 1 head of dim 32 in one window, 422 slots of 260 bytes) needs "5 M".
TEST(TraceRunnerLimits, WorkLimitNamesWholeMillions) {
  const std::string text = "trace 1\nrows 1\nlayer a kv heads=1 dim=32\nwindow 422\n";
  const uint64_t pairs = 422 * 423 / 2;
  const uint64_t work = 422 * 422 + 422 * (2 * 32 * sizeof(float) + sizeof(int32_t)) + pairs * 64;
  ASSERT_EQ(work, 5999996u);
  ASSERT_EQ(SmallestWork(text, false), work);
  trace::RunOptions options;
  options.max_work = 1000000;
  std::ostringstream out, err;
  EXPECT_EQ(trace::RunTraceText(text, "work.trace", options, out, err), 2);
  EXPECT_NE(err.str().find("work.trace:4: limit: work of the trace up to here needs 5 M operations "
                           "(budget 1 M, --max-work)"),
            std::string::npos)
      << err.str();
}

// The `state` hash as README defines it ("Where TRACE.md leaves room"):
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

// A program built in code may hold fewer source lines than its statements
// name: `--emit` echoes only the lines it has and reads none past them, also
// when a refused statement past them stops the run there.
TEST(TraceRunnerEmit, EchoesOnlyTheSourceLinesItHas) {
  const std::string text = "trace 1\nrows 1\nlayer a kv\nwindow 2\ntrim 3\n";
  trace::Program program;
  trace::SyntaxError error;
  ASSERT_TRUE(trace::ParseTrace(text, "built.trace", &program, &error)) << error.ToString();
  trace::RunOptions options;
  options.emit = true;
  {
    std::ostringstream out, err;
    EXPECT_EQ(trace::RunProgram(program, options, out, err), 1);
    EXPECT_NE(err.str().find("built.trace:5: error: "), std::string::npos) << err.str();
    EXPECT_EQ(out.str(), "trace 1\nrows 1\nlayer a kv\nwindow 2\nexpect sees a r0 p0: 0\n"
                         "expect sees a r0 p1: 0 1\nexpect positions 2\ntrim 3\n");
  }
  program.lines.resize(3);  // the header only
  {
    std::ostringstream out, err;
    EXPECT_EQ(trace::RunProgram(program, options, out, err), 1);
    EXPECT_EQ(out.str(), "trace 1\nrows 1\nlayer a kv\n");
  }
  std::vector<std::string>().swap(program.lines);  // no text at all
  {
    std::ostringstream out, err;
    EXPECT_EQ(trace::RunProgram(program, options, out, err), 1);
    EXPECT_EQ(out.str(), "");
  }
}

// With save_reloads_dir, every reload writes the encoded layout to
// DIR/<file name>.<line>.kvsl, and the file decodes.
TEST(TraceRunnerReloads, SavedLayoutsAreWritten) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("kvspec_reloads_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  ASSERT_TRUE(fs::create_directories(dir));
  trace::RunOptions options;
  options.save_reloads_dir = dir.string();
  std::ostringstream out, err;
  EXPECT_EQ(trace::RunTraceText("trace 1\nrows 1\nlayer a kv\nwindow 2\nreload\n",
                                "some/where/probe.trace", options, out, err),
            0)
      << err.str();
  const fs::path saved = dir / "probe.trace.5.kvsl";
  ASSERT_TRUE(fs::exists(saved));
  std::ifstream file(saved, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::unique_ptr<Layout> back;
  EXPECT_TRUE(DecodeLayout(bytes, &back).ok());
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back->columns(), 2);
  fs::remove_all(dir);
}

// A file that cannot be read: exit status 2 and `FILE:1:1: cannot open file`.
TEST(TraceRunnerFiles, UnreadableFileIsReported) {
  const std::string path = "/nonexistent-kvspec-dir/missing.trace";
  std::ostringstream out, err;
  EXPECT_EQ(trace::RunTraceFile(path, trace::RunOptions(), out, err), 2);
  EXPECT_EQ(err.str(), path + ":1:1: cannot open file\n");
  EXPECT_EQ(out.str(), "");
}

// A trace file over the 4 MiB cap is refused as a limit (exit 2), naming
// the cap; one of exactly 4 MiB is read.
TEST(TraceRunnerFiles, AFileOverFourMiBIsRefusedNamingTheCap) {
  namespace fs = std::filesystem;
  const fs::path path =
      fs::path(::testing::TempDir()) / ("kvspec_large_" + std::to_string(::getpid()) + ".trace");
  const std::string head = "trace 1\nrows 1\nlayer a kv\nwindow 1\n";
  std::string text = head + std::string((size_t{4} << 20) - head.size() - 1, '#') + "\n";
  ASSERT_EQ(text.size(), size_t{4} << 20);
  for (const bool over : {false, true}) {
    if (over) text += "\n";
    {
      std::ofstream file(path, std::ios::binary);
      file << text;
    }
    std::ostringstream out, err;
    const int code = trace::RunTraceFile(path.string(), trace::RunOptions(), out, err);
    if (over) {
      EXPECT_EQ(code, 2);
      EXPECT_EQ(err.str(), path.string() + ":1:1: file larger than 4 MiB\n");
    } else {
      EXPECT_EQ(code, 0) << err.str();
    }
  }
  fs::remove(path);
}

// A directory given as a trace: exit status 2, said to be a directory (it
// was read as an empty trace).
TEST(TraceRunnerFiles, ADirectoryIsReportedAsOne) {
  const std::string dir = ::testing::TempDir();
  std::ostringstream out, err;
  EXPECT_EQ(trace::RunTraceFile(dir, trace::RunOptions(), out, err), 2);
  EXPECT_EQ(err.str(), dir + ":1:1: a directory, not a trace file\n");
  EXPECT_EQ(out.str(), "");
}

// Standard input that never ends: read a chunk at a time, refused once past
// the 4 MiB cap (it was read whole before the cap was checked: this input
// never ended, and `yes | kvspec trace -` grew without bound). The stream
// counts what was taken from it.
TEST(TraceRunnerFiles, StandardInputIsCappedAtFourMiBWhileItIsRead) {
  class Endless : public std::streambuf {
   public:
    size_t taken = 0;

   protected:
    int_type underflow() override {
      std::memset(chunk_, '#', sizeof(chunk_));
      taken += sizeof(chunk_);
      if (taken > (size_t{64} << 20)) return traits_type::eof();  // a safety stop
      setg(chunk_, chunk_, chunk_ + sizeof(chunk_));
      return traits_type::to_int_type(chunk_[0]);
    }

   private:
    char chunk_[4096];
  } endless;
  std::streambuf* saved = std::cin.rdbuf(&endless);
  std::string text = "unchanged";
  std::ostringstream err;
  const int code = trace::ReadTraceSource("-", &text, err);
  std::cin.rdbuf(saved);
  std::cin.clear();
  EXPECT_EQ(code, 2);
  EXPECT_EQ(err.str(), "<stdin>:1:1: file larger than 4 MiB\n");
  EXPECT_EQ(text, "");
  EXPECT_LE(endless.taken, trace::kMaxTraceBytes + (size_t{128} << 10));
  // A trace on standard input runs as `<stdin>`.
  std::istringstream small("trace 1\nrows 1\nlayer a kv\nexpect positions 1\n");
  saved = std::cin.rdbuf(small.rdbuf());
  std::ostringstream out, err2;
  const int run = trace::RunTraceFile("-", trace::RunOptions(), out, err2);
  std::cin.rdbuf(saved);
  std::cin.clear();
  EXPECT_EQ(run, 1);
  EXPECT_EQ(err2.str(), "<stdin>:4: expected positions 1 got 0\n");
}

// `expect out` compares every value of the query's output: a wrong value
// anywhere in the list fails the expectation, naming its line.
TEST(TraceRunnerExpect, ExpectOutComparesEveryValue) {
  const std::string text = "trace 1\nrows 1\nlayer a kv dim=4\nwindow 2\n";
  trace::RunOptions options;
  options.values = true;
  options.emit = true;
  std::ostringstream emitted, err;
  ASSERT_EQ(trace::RunTraceText(text, "out.trace", options, emitted, err), 0) << err.str();
  std::string expect;
  std::istringstream lines(emitted.str());
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind("expect out a r0 p1:", 0) == 0) expect = l;
  }
  ASSERT_FALSE(expect.empty()) << emitted.str();
  std::vector<std::string> words;
  std::istringstream split(expect);
  for (std::string w; split >> w;) words.push_back(w);
  ASSERT_EQ(words.size(), 5u + 4u);  // expect out a r0 p1: and 4 values
  options.emit = false;
  for (size_t changed = 4; changed < words.size(); ++changed) {  // 4: none
    std::string line;
    for (size_t w = 0; w < words.size(); ++w) {
      line += (w ? " " : "") + (w == changed && changed > 4 ? std::string("1000") : words[w]);
    }
    std::ostringstream out, fail;
    const int code = trace::RunTraceText(text + line + "\n", "out.trace", options, out, fail);
    if (changed == 4) {
      EXPECT_EQ(code, 0) << line << "\n" << fail.str();  // unchanged
    } else {
      EXPECT_EQ(code, 1) << "value " << changed - 5 << " changed: " << line;
      EXPECT_NE(fail.str().find("out.trace:5:"), std::string::npos) << fail.str();
    }
  }
}

// Extracting a row the batch does not have is refused, a negative row as
// much as one past the end, naming the row and the batch's row count; the
// cache is left as it was and nothing is made.
TEST(BatchExtract, ANegativeRowIsRefused) {
  BatchedKvCache cache(2, 1, 4);
  auto hash = [&cache] {
    Hasher h;
    cache.HashState(&h);
    return h.value();
  };
  const uint64_t before = hash();
  for (int32_t row : {-1, -2, 2}) {
    std::unique_ptr<Cache> made;
    const Status s = ExtractRow(cache, row, &made);
    ASSERT_FALSE(s.ok()) << "row " << row;
    EXPECT_EQ(s.message(), "extract: no row " + std::to_string(row) + " (the batch has 2)");
    EXPECT_EQ(made, nullptr);
    EXPECT_EQ(hash(), before);
  }
}

// A plain attention layer needs a dim of at least 1: a dim of 0 is a bad
// shape, refused by Layout::Create naming the layer and its shape.
TEST(LayoutCreate, APlainLayerOfDimZeroIsRefused) {
  LayerConfig c;
  c.name = "a";
  c.heads = 1;
  c.dim = 0;
  std::unique_ptr<Layout> layout;
  const Status s = Layout::Create(1, {c}, &layout);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("layer 'a': bad shape (heads 1, query heads 1, dim 0", 0), 0u)
      << s.message();
  EXPECT_EQ(layout, nullptr);
  c.dim = 1;
  EXPECT_TRUE(Layout::Create(1, {c}, &layout).ok());
}

// `expect equal NAME` that fails names the first difference with the
// current layout's side first and NAME's second ("positions 2 vs 0": the
// current layout holds 2 tokens, the fork none).
TEST(TraceRunnerExpect, ExpectEqualNamesTheCurrentSideFirst) {
  const std::string text =
      "trace 1\nrows 1\nlayer a kv\nfork other\nwindow 2\nexpect equal other\n";
  trace::RunOptions options;
  std::ostringstream out, err;
  EXPECT_EQ(trace::RunTraceText(text, "equal.trace", options, out, err), 1);
  EXPECT_NE(err.str().find("equal.trace:6: expected equal other got positions 2 vs 0"),
            std::string::npos)
      << err.str();
  // The other way round: the fork holds the tokens.
  const std::string other =
      "trace 1\nrows 1\nlayer a kv\nfork other\nuse other\nwindow 2\nuse main\n"
      "expect equal other\n";
  std::ostringstream out2, err2;
  EXPECT_EQ(trace::RunTraceText(other, "equal.trace", options, out2, err2), 1);
  EXPECT_NE(err2.str().find("equal.trace:8: expected equal other got positions 0 vs 2"),
            std::string::npos)
      << err2.str();
}

// A failed `expect equal NAME` names the first difference, the whole of
// stderr compared: the row counts; the positions; per layer in header
// order and per row, a recurrent layer's conv state, then its recurrent
// state (a conv kernel of 1 keeps no conv state, so only the recurrent
// state can differ); an attention layer's first differing token by its
// position, in the row it is in (row 0 left-padded by one column, so the
// rows' slots hold different positions).
TEST(TraceRunnerExpect, ExpectEqualNamesItsFirstDifferenceExactly) {
  const std::string header = "trace 1\nrows 2\nlayer s ssm conv=2\nlayer g ssm conv=1\nlayer a kv\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"extract 1 as one\nexpect equal one\n", "t.trace:7: expected equal one got rows 2 vs 1\n"},
      {"fork b\nwindow 1\nexpect equal b\n", "t.trace:8: expected equal b got positions 1,1 vs 0,0\n"},
      {"window 3 left=1,0\nfork b\ndecode ids=2/9\nuse b\ndecode ids=2/3\nexpect equal main\n",
       "t.trace:11: expected equal main got layer s row 1: conv state differs\n"},
  };
  for (const auto& [body, want] : cases) {
    trace::RunOptions options;
    std::ostringstream out, err;
    const int status = trace::RunTraceText(header + body, "t.trace", options, out, err);
    EXPECT_EQ(status, 1) << body;
    EXPECT_EQ(err.str(), want) << body;
  }
  // Only the recurrent state of `g` (no conv state) or only the tokens of
  // `a` can differ when the ssm layer with a conv state is left out.
  const std::vector<std::tuple<std::string, std::string, std::string>> layers = {
      {"layer g ssm conv=1\nlayer a kv\n", "window 3 left=1,0\nfork b\ndecode ids=2/9\nuse b\n"
                                           "decode ids=2/3\nexpect equal main\n",
       "t.trace:10: expected equal main got layer g row 1: recurrent state differs\n"},
      {"layer a kv\n", "window 3 left=1,0\nfork b\ndecode ids=2/9\nuse b\ndecode ids=2/3\n"
                       "expect equal main\n",
       "t.trace:9: expected equal main got layer a row 1 position 3 differs\n"},
      {"layer a kv\nlayer z kv dim=2\n", "window 3 left=1,0\nfork b\ndecode ids=5/3\nuse b\n"
                                         "decode ids=2/3\nexpect equal main\n",
       "t.trace:10: expected equal main got layer a row 0 position 2 differs\n"},
  };
  for (const auto& [layer_lines, body, want] : layers) {
    trace::RunOptions options;
    std::ostringstream out, err;
    const std::string text = "trace 1\nrows 2\n" + layer_lines + body;
    EXPECT_EQ(trace::RunTraceText(text, "t.trace", options, out, err), 1) << text;
    EXPECT_EQ(err.str(), want) << text;
  }
  // Equal: a copy of every kind of layer; and two rings (window 2) that
  // differ only in a token no later query sees (position 1 once 2 is
  // held: a ring compares its last W - 1 tokens).
  const std::vector<std::string> equal = {
      header + "window 3 left=1,0\nfork b\nexpect equal b\ndecode\nuse b\ndecode\nexpect equal main\n",
      "trace 1\nrows 1\nlayer r rotating window=2\nfork b\ndecode\ndecode ids=1\ndecode\n"
      "use b\ndecode\ndecode ids=9\ndecode\nexpect equal main\n"};
  for (const std::string& text : equal) {
    trace::RunOptions options;
    std::ostringstream out, err;
    EXPECT_EQ(trace::RunTraceText(text, "t.trace", options, out, err), 0) << text;
    EXPECT_EQ(err.str(), "") << text;
  }
}

// `expect equal` compares every key and value float of every head of each
// token it compares: two layouts whose attention layer differs in any one
// float (of a key or a value, of either head, of either row) differ at
// that token's position, in that row.
TEST(TraceRunnerExpect, DifferenceSeesEveryKeyAndValueFloatOfEveryHead) {
  LayerConfig kv;
  kv.name = "a";
  kv.heads = 2;
  kv.dim = 3;
  const int rows = 2, tokens = 3;
  const size_t per_token = 2 * 3, n = rows * tokens * per_token;
  const std::vector<float> q = Filled(n, 0.0f), k = Filled(n, 1.0f), v = Filled(n, -50.0f);
  auto make = [&](const std::vector<float>& keys, const std::vector<float>& values) {
    std::unique_ptr<Layout> layout;
    EXPECT_TRUE(Layout::Create(rows, {kv}, &layout).ok());
    if (layout) {
      EXPECT_TRUE(layout
                      ->Forward(ForwardColumns::Dense(rows, tokens),
                                {AttentionIO(q.data(), keys.data(), values.data(), nullptr)})
                      .ok());
    }
    return layout;
  };
  const std::unique_ptr<Layout> base = make(k, v);
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(trace::runner_internal::Difference(*base, *make(k, v)), "");
  for (int which = 0; which < 2; ++which) {
    for (size_t i = 0; i < n; ++i) {
      std::vector<float> k2 = k, v2 = v;
      (which == 0 ? k2 : v2)[i] += 0.5f;
      const std::unique_ptr<Layout> other = make(k2, v2);
      ASSERT_NE(other, nullptr);
      const size_t row = i / (tokens * per_token), pos = i / per_token % tokens;
      EXPECT_EQ(trace::runner_internal::Difference(*base, *other),
                "layer a row " + std::to_string(row) + " position " + std::to_string(pos) +
                    " differs")
          << (which == 0 ? "key " : "value ") << i;
    }
  }
}

}  // namespace
}  // namespace kvspec
