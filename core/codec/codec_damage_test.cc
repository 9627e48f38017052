// Damaged encodings (core/codec/codec.h): a real cache or layout is
// encoded, then one field is changed at an offset the test computes from
// the format and checks before changing it (so that a format change fails
// here loudly instead of testing something else). Each damage is refused
// for its own reason, before anything is allocated from it: every bounded
// field outside its bounds with its exact message, vectors of the wrong
// count, configs that do not describe their cache, states and round
// records cut short.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kvspec/core/codec/codec.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/kernels/conv1d.h"

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
// capacity; u8 storage type; i64 columns, peak, peak before the write; u64
// slots, first; i64 held; then the vectors keys, values (bytes), slot
// positions, ...
struct ColumnOffsets {
  size_t rows, heads, dim, slots, keys;  // keys: the u64 count of the keys
  uint64_t elements;                     // key (and value) bytes: 4 per fp32 value
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
  EXPECT_EQ(static_cast<uint8_t>(bytes[payload + 20]), 0);  // f32
  o.slots = payload + 21 + 24;
  o.keys = o.slots + 8 + 8 + 8;
  o.elements = static_cast<uint64_t>(Get<int32_t>(bytes, o.rows)) *
               static_cast<uint64_t>(Get<int32_t>(bytes, o.heads)) *
               Get<uint64_t>(bytes, o.slots) *
               static_cast<uint64_t>(Get<int32_t>(bytes, o.dim)) * 4;
  EXPECT_EQ(Get<uint64_t>(bytes, o.keys), o.elements);
  o.values = o.keys + 8 + o.elements;
  EXPECT_EQ(Get<uint64_t>(bytes, o.values), o.elements);
  o.slot_pos = o.values + 8 + o.elements;
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
  ASSERT_GT(o.elements, 4u);
  std::string shorter = bytes.substr(0, o.keys);
  const uint64_t fewer = o.elements - 4;
  shorter.append(reinterpret_cast<const char*>(&fewer), 8);
  shorter.append(bytes, o.keys + 8, fewer);  // drop the last key float
  shorter.append(bytes, o.values, std::string::npos);
  std::unique_ptr<Cache> out;
  const Status s = DecodeCache(shorter, &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("keys holds"), std::string::npos) << s.message();
  EXPECT_EQ(out, nullptr);
}

// Version 1 (fp32 only: no storage type, keys and values counted in
// floats) still loads, as the same cache; saving writes version 2.
TEST(CodecDamage, AVersion1CacheLoadsAsTheSameCache) {
  ColumnOffsets o;
  const std::string v2 = EncodedPaddedBatch(&o);
  const size_t type = o.rows + 20;
  std::string v1 = v2.substr(0, type) + v2.substr(type + 1, o.keys - type - 1);
  v1[4] = 1;
  const uint64_t floats = o.elements / 4;
  for (size_t vector : {o.keys, o.values}) {
    v1.append(reinterpret_cast<const char*>(&floats), 8);
    v1.append(v2, vector + 8, o.elements);
  }
  v1.append(v2, o.slot_pos, std::string::npos);
  std::unique_ptr<Cache> old_one, new_one;
  ASSERT_TRUE(DecodeCache(v1, &old_one).ok());
  ASSERT_TRUE(DecodeCache(v2, &new_one).ok());
  Hasher old_hash, new_hash;
  old_one->HashState(&old_hash);
  new_one->HashState(&new_hash);
  EXPECT_EQ(old_hash.value(), new_hash.value());
  std::string again;
  ASSERT_TRUE(EncodeCache(*old_one, &again).ok());
  EXPECT_EQ(again, v2);
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

// The codec allocates a recurrent cache's states before it reads them, so
// it first checks that the input holds them: an encoding cut to half its
// length (half of the states missing) is refused as "recurrent state
// larger than the input", before anything is allocated.
TEST(CodecDamage, ATruncatedRecurrentStateIsRefusedBeforeItIsAllocated) {
  SsmShape shape;
  shape.value_heads = 4;
  shape.key_heads = 2;
  shape.dk = 16;
  shape.dv = 16;
  SsmCache cache(shape);
  std::string bytes;
  ASSERT_TRUE(EncodeCache(cache, &bytes).ok());
  const size_t state_bytes = 2 * (shape.ConvFloats() + shape.RecurrentFloats()) * sizeof(float);
  // The states are nearly all of the encoding.
  ASSERT_GT(state_bytes, bytes.size() - 256);
  std::unique_ptr<Cache> out;
  ASSERT_TRUE(DecodeCache(bytes, &out).ok());
  out.reset();
  const Status s = DecodeCache(bytes.substr(0, bytes.size() / 2), &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("recurrent state larger than the input"), std::string::npos)
      << s.message();
  EXPECT_EQ(out, nullptr);
}

// The up-front check is exactly as strong as the states are large: over
// every cut of a batched recurrent cache's encoding, the cuts refused as
// "recurrent state larger than the input" are consecutive, and there are
// exactly as many as the bytes of both buffers of every row (the states
// start right after the shape, so a cut leaves 0 .. state bytes - 1 of them;
// a longer cut is refused by whatever later field it cuts into). Shapes
// with one and four conv taps, whose conv state has a key part and none.
TEST(CodecDamage, TheStateSizeCheckRefusesExactlyTheCutsThatCannotHoldTheStates) {
  for (const int conv : {1, 4}) {
    SCOPED_TRACE("conv kernel " + std::to_string(conv));
    SsmShape shape;
    shape.value_heads = 2;
    shape.key_heads = 1;
    shape.dk = 2;
    shape.dv = 3;
    shape.conv = conv;
    const int rows = 2;
    BatchedSsmCache cache(rows, shape);
    std::string bytes;
    ASSERT_TRUE(EncodeCache(cache, &bytes).ok());
    const size_t state_bytes =
        size_t{rows} * 2 * (shape.ConvFloats() + shape.RecurrentFloats()) * sizeof(float);
    ASSERT_GT(bytes.size(), state_bytes);
    std::unique_ptr<Cache> out;
    ASSERT_TRUE(DecodeCache(bytes, &out).ok());
    out.reset();
    std::vector<size_t> refused_as_state;
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
      const Status s = DecodeCache(bytes.substr(0, cut), &out);
      ASSERT_FALSE(s.ok()) << "a cut at " << cut << " of " << bytes.size() << " bytes";
      ASSERT_EQ(out, nullptr);
      if (s.message().find("recurrent state larger than the input") != std::string::npos) {
        refused_as_state.push_back(cut);
      }
    }
    ASSERT_FALSE(refused_as_state.empty());
    EXPECT_EQ(refused_as_state.size(), state_bytes);
    EXPECT_EQ(refused_as_state.back() - refused_as_state.front() + 1, refused_as_state.size())
        << "not consecutive";
  }
}

// An armed cache's encoding ends with its round records, one per row, each
// an 8-byte count and the record's floats. The codec allocates the records
// before it reads them, so it first checks that the input holds a count for
// every row: an armed cache of 16 rows cut anywhere inside its last 16
// counts (an armed round with no verify token yet, so every record is
// empty) is refused with exactly that message, before anything is read.
TEST(CodecDamage, RoundRecordsOfAnArmedCacheCutShortAreRefusedBeforeTheyAreAllocated) {
  SsmShape shape;
  shape.value_heads = 1;
  shape.key_heads = 1;
  shape.dk = 2;
  shape.dv = 2;
  const int rows = 16;
  BatchedSsmCache cache(rows, shape);
  ASSERT_TRUE(cache.ArmRound().ok());
  std::string bytes;
  ASSERT_TRUE(EncodeCache(cache, &bytes).ok());
  std::unique_ptr<Cache> out;
  ASSERT_TRUE(DecodeCache(bytes, &out).ok());
  out.reset();
  const size_t counts = rows * sizeof(uint64_t);
  ASSERT_GT(bytes.size(), counts);
  // The last 16 counts are zero: the records are empty.
  EXPECT_EQ(bytes.substr(bytes.size() - counts), std::string(counts, '\0'));
  for (const size_t cut : {size_t{1}, size_t{8}, size_t{9}, counts - 1, counts}) {
    SCOPED_TRACE("cut by " + std::to_string(cut) + " bytes");
    const Status s = DecodeCache(bytes.substr(0, bytes.size() - cut), &out);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("round records claim more than the input holds"),
              std::string::npos)
        << s.message();
    EXPECT_EQ(out, nullptr);
  }
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
  int width;     // 4: int32 (or uint32 when lo >= 0 and unsigned_field), 8: int64, 1: uint8
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
  if (f.width == 1) return Written<uint8_t>(bytes, f.at, v);
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
    fields.push_back({"storage type", Layer0Field(bytes, static_cast<int>(config.size())), 1,
                      true, 0, 3});
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
                             {"storage type", at + 20, 1, true, 0, 3},
                             {"columns", at + 21, 8, false, 0, int32_max},
                             {"peak", at + 29, 8, false, 0, int32_max},
                             {"slots", at + 45, 8, true, 0, windows}},
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

}  // namespace
}  // namespace kvspec
