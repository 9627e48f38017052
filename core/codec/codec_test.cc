// Unit tests of the persistence codecs (core/codec/codec.h) on hostile input:
// layouts of every kind, in the states the trace runner reaches (wrapped
// rings, armed and verified rounds, bypass-trim bounds, padding), are
// encoded, then
// - every encoding decodes and re-encodes to the same bytes;
// - every proper prefix and every extension by a byte is refused;
// - every single-byte change is either refused with a message or decodes
//   to a layout (or cache) that re-encodes to exactly the changed bytes:
//   nothing the decoder accepts is silently normalised or dropped.
// The layouts come from `reload` statements of traces run with
// RunOptions::save_reloads_dir, which writes each encoded layout to a file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kvspec/core/codec/codec.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/core/layout_test_util.h"
#include "kvspec/runner/runner.h"

namespace kvspec {
namespace {

namespace fs = std::filesystem;

struct Encoded {
  std::string what;   // trace name and line
  std::string bytes;  // an encoded layout
};

// Runs each trace with save_reloads_dir and returns the layouts written.
std::vector<Encoded> EncodedLayouts() {
  const std::vector<std::pair<std::string, std::string>> traces = {
      {"kv_padding_bypass",
       "trace 1\nrows 3\nlayer a kv heads=2 dim=3\nlayer b kv\n"
       "window 4 left=1,0,2 ids=1,2,3/4,5,6,7/8,9\n"
       "reload\n"  // right after a window: the encoding holds a bypass-trim bound
       "expect error trim 1 bypass\n"
       "window 2 ids=10,11/12,13/14,15\ntrim 1 bypass\ndecode ids=16/17/18\nreload\n"},
      {"ring_wrapped",
       "trace 1\nrows 2\nlayer r rotating window=3 capacity=4\nlayer s rotating window=3 "
       "capacity=4 heads=2 dim=2\nlayer k kv dim=2\n"
       "window 3 ids=1,2,3/4,5,6\nreload\ndecode ids=7/8\ndecode ids=9/10\nreload\n"
       "window 2 right=1,0 ids=11/12,13\nreload\n"},
      {"ssm_rounds",
       "trace 1\nrows 2\nlayer g ssm heads=2 kheads=1 dk=3 dv=2 conv=3\nlayer a kv\n"
       "window 3 left=1,0 ids=1,2/3,4,5\nreload\narm\nreload\n"
       "window 3 ids=6,7,8/9,10,11\nreload\naccept 1,2\nreload\n"},
      {"single_row",
       "trace 1\nrows 1\nlayer g ssm conv=2\nlayer r rotating window=2\nlayer a kv\n"
       "window 3 ids=1,2,3\narm\ndecode ids=4\nreload\n"},
  };
  const fs::path dir = fs::temp_directory_path() /
                       ("kvspec_codec_test." + std::to_string(static_cast<long>(getpid())));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<Encoded> layouts;
  for (const auto& [name, text] : traces) {
    trace::RunOptions options;
    options.save_reloads_dir = dir.string();
    std::ostringstream out, err;
    const int status = trace::RunTraceText(text, name, options, out, err);
    EXPECT_EQ(status, 0) << name << ": " << err.str();
    int reloads = 0;
    std::istringstream lines(text);
    std::string line;
    for (int number = 1; std::getline(lines, line); ++number) {
      if (line != "reload") continue;
      ++reloads;
      const std::string file = name + "." + std::to_string(number) + ".kvsl";
      std::ifstream in(dir / file, std::ios::binary);
      EXPECT_TRUE(in) << file;
      layouts.push_back({file, std::string(std::istreambuf_iterator<char>(in), {})});
    }
    EXPECT_GT(reloads, 0) << name;
  }
  fs::remove_all(dir);
  return layouts;
}

// Decodes `bytes` as a layout: an error with a message, or a layout that
// encodes back to `bytes`. Returns whether it decoded.
bool CheckLayoutBytes(const std::string& bytes, const std::string& what) {
  std::unique_ptr<Layout> layout;
  const Status s = DecodeLayout(bytes, &layout);
  if (!s.ok()) {
    EXPECT_FALSE(s.message().empty()) << what;
    return false;
  }
  std::string again;
  EXPECT_TRUE(EncodeLayout(*layout, &again).ok()) << what;
  EXPECT_TRUE(again == bytes) << what << ": accepted, but re-encodes differently";
  return true;
}

bool CheckCacheBytes(const std::string& bytes, const std::string& what) {
  std::unique_ptr<Cache> cache;
  const Status s = DecodeCache(bytes, &cache);
  if (!s.ok()) {
    EXPECT_FALSE(s.message().empty()) << what;
    return false;
  }
  std::string again;
  EXPECT_TRUE(EncodeCache(*cache, &again).ok()) << what;
  EXPECT_TRUE(again == bytes) << what << ": accepted, but re-encodes differently";
  return true;
}

// The values each byte is changed to.
std::vector<uint8_t> Changes(uint8_t b) {
  std::vector<uint8_t> out;
  for (uint8_t c : {static_cast<uint8_t>(b ^ 0x01), static_cast<uint8_t>(b ^ 0x80),
                    static_cast<uint8_t>(b + 1), uint8_t{0}, uint8_t{0xFF}}) {
    bool seen = c == b;
    for (uint8_t o : out) seen = seen || o == c;
    if (!seen) out.push_back(c);
  }
  return out;
}

// Runs `check` on `bytes`, its prefixes, an extension and every changed
// byte; returns how many changed inputs decoded and how many were refused.
template <class Check>
std::pair<int, int> Hostile(const std::string& bytes, const std::string& what, Check check) {
  EXPECT_TRUE(check(bytes, what)) << what << ": the original does not decode";
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(check(bytes.substr(0, n), what + " prefix " + std::to_string(n)));
  }
  EXPECT_FALSE(check(bytes + '\0', what + " + 1 byte"));
  int decoded = 0, refused = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t c : Changes(static_cast<uint8_t>(bytes[i]))) {
      std::string changed = bytes;
      changed[i] = static_cast<char>(c);
      if (check(changed, what + " byte " + std::to_string(i) + " = " + std::to_string(c))) {
        ++decoded;
      } else {
        ++refused;
      }
    }
  }
  return {decoded, refused};
}

TEST(Codec, LayoutsSurviveEveryTruncationAndByteChange) {
  const std::vector<Encoded> layouts = EncodedLayouts();
  ASSERT_EQ(layouts.size(), 10u);
  for (const Encoded& e : layouts) {
    const auto [decoded, refused] = Hostile(e.bytes, e.what, CheckLayoutBytes);
    // Changed float contents decode; changed sizes, kinds, magic and state
    // are refused.
    EXPECT_GT(decoded, 0) << e.what;
    EXPECT_GT(refused, 0) << e.what;
  }
}

TEST(Codec, CachesSurviveEveryTruncationAndByteChange) {
  const std::vector<Encoded> layouts = EncodedLayouts();
  ASSERT_FALSE(layouts.empty());
  int caches = 0;
  for (const Encoded& e : layouts) {
    std::unique_ptr<Layout> layout;
    ASSERT_TRUE(DecodeLayout(e.bytes, &layout).ok()) << e.what;
    for (size_t l = 0; l < layout->size(); ++l) {
      std::string bytes;
      ASSERT_TRUE(EncodeCache(layout->cache(l), &bytes).ok());
      const std::string what = e.what + " layer " + std::to_string(l);
      const auto [decoded, refused] = Hostile(bytes, what, CheckCacheBytes);
      EXPECT_GT(decoded, 0) << what;
      EXPECT_GT(refused, 0) << what;
      ++caches;
    }
  }
  EXPECT_EQ(caches, 2 * 2 + 3 * 3 + 4 * 2 + 1 * 3);  // reloads * layers per trace
}

// The recurrent state is persisted in TRACE.md's order [Hv][dv][dk] (the
// cache keeps it in transposed tiles per head for the kernel): the encoded bytes hold
// the trace-order state and not the kernel-order one, and a decode restores
// the kernel order.
TEST(Codec, RecurrentStatesArePersistedInTraceOrder) {
  SsmShape s;
  s.value_heads = 2;
  s.key_heads = 1;
  s.dk = 3;
  s.dv = 5;
  s.conv = 2;
  SsmCache cache(s);
  const size_t C = s.Channels();
  std::vector<float> w(static_cast<size_t>(s.conv) * C), x(C), gate(2, 0.9f), beta(2, 0.5f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.01f * static_cast<float>(i % 17) - 0.05f;
  for (int t = 0; t < 3; ++t) {
    for (size_t c = 0; c < C; ++c) x[c] = 0.1f * static_cast<float>((c * 7 + t * 3) % 11) - 0.4f;
    SsmIO io;
    io.conv_weights = w.data();
    io.x = x.data();
    io.gate = gate.data();
    io.beta = beta.data();
    ASSERT_TRUE(cache.Forward(ForwardColumns::Dense(1, 1, true), io).ok());
  }
  const size_t n = s.RecurrentFloats();
  const std::vector<float> trace = cache.RecurrentStateTraceOrder(0);
  const std::string trace_bytes(reinterpret_cast<const char*>(trace.data()), n * sizeof(float));
  const std::string kernel_bytes(reinterpret_cast<const char*>(cache.RecurrentState(0)),
                                 n * sizeof(float));
  ASSERT_NE(trace_bytes, kernel_bytes);
  std::string bytes;
  ASSERT_TRUE(EncodeCache(cache, &bytes).ok());
  EXPECT_NE(bytes.find(trace_bytes), std::string::npos);
  EXPECT_EQ(bytes.find(kernel_bytes), std::string::npos);
  std::unique_ptr<Cache> decoded;
  ASSERT_TRUE(DecodeCache(bytes, &decoded).ok());
  const auto* back = dynamic_cast<const SsmCache*>(decoded.get());
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(0, std::memcmp(back->RecurrentState(0), cache.RecurrentState(0), n * sizeof(float)));
  EXPECT_EQ(back->RowStateHash(0), cache.RowStateHash(0));
}

TEST(Codec, RefusesOtherMagicVersionsAndKinds) {
  const std::vector<Encoded> layouts = EncodedLayouts();
  ASSERT_FALSE(layouts.empty());
  std::unique_ptr<Layout> layout;
  ASSERT_TRUE(DecodeLayout(layouts[0].bytes, &layout).ok());
  std::string cache;
  ASSERT_TRUE(EncodeCache(layout->cache(0), &cache).ok());
  std::unique_ptr<Cache> c;
  // A layout is not a cache and the other way round.
  EXPECT_FALSE(DecodeCache(layouts[0].bytes, &c).ok());
  EXPECT_FALSE(DecodeLayout(cache, &layout).ok());
  // Versions 0 and 3 (1 and 2 are read).
  for (char version : {0, 3}) {
    std::string other = cache;
    other[4] = version;
    const Status s = DecodeCache(other, &c);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("unsupported version " + std::to_string(version)),
              std::string::npos)
        << s.message();
  }
  // An unknown kind string of the same length.
  std::string kind = cache;
  const size_t at = kind.find("batched_kv");
  ASSERT_NE(at, std::string::npos);
  kind[at] = 'B';
  const Status k = DecodeCache(kind, &c);
  EXPECT_FALSE(k.ok());
  EXPECT_NE(k.message().find("no codec for cache kind 'Batched_kv'"), std::string::npos)
      << k.message();
  EXPECT_FALSE(HasCodec("Batched_kv"));
  EXPECT_FALSE(HasCodec(""));
  EXPECT_TRUE(HasCodec("batched_ssm"));
}

// A layout no forward has written, of every row count up to the trace
// limit and every kind, is read back from its own encoding (the column
// codec's size check once counted the last write's per-row counts, empty
// until the first write, and refused 23 rows and more).
TEST(Codec, FreshLayoutsOfEveryRowCountRoundTrip) {
  std::vector<LayerConfig> layers(3);
  layers[0].name = "k";
  layers[1].name = "r";
  layers[1].kind = CacheKind::kRotating;
  layers[1].window = layers[1].capacity = 2;
  layers[2].name = "s";
  layers[2].kind = CacheKind::kSsm;
  for (int rows = 1; rows <= 64; ++rows) {
    for (size_t l = 0; l < layers.size(); ++l) {
      std::unique_ptr<Layout> layout, loaded;
      ASSERT_TRUE(Layout::Create(rows, {layers[l]}, &layout).ok());
      std::string bytes, again;
      ASSERT_TRUE(EncodeLayout(*layout, &bytes).ok());
      const Status s = DecodeLayout(bytes, &loaded);
      ASSERT_TRUE(s.ok()) << rows << " rows, layer " << layers[l].name << ": " << s.message();
      ASSERT_TRUE(EncodeLayout(*loaded, &again).ok());
      EXPECT_EQ(again, bytes);
    }
  }
}

// A column store of a kind the codec does not know (a user's own cache
// built on ColumnStore, as the kv and rotating caches are) is refused by
// EncodeCache, naming its kind, and nothing is written: the codec encodes
// only the kinds it can decode.
class PagedKvCache final : public WithKind<PagedKvCache, ColumnStore> {
 public:
  static constexpr std::string_view kKind = "paged_kv";
  PagedKvCache() : WithKind(1, 1, 2, kNoWindow, 0) {}
  std::unique_ptr<Cache> Copy() const override { return std::make_unique<PagedKvCache>(*this); }
};

TEST(Codec, AColumnStoreOfAnUnknownKindIsNotEncoded) {
  PagedKvCache paged;
  const std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
  ASSERT_TRUE(paged.Append(ForwardColumns::Dense(1, 2), x.data(), x.data()).ok());
  ASSERT_NE(paged.AsColumnStore(), nullptr);
  ASSERT_FALSE(HasCodec(paged.kind()));
  std::string bytes = "untouched";
  const Status s = EncodeCache(paged, &bytes);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no codec for cache kind 'paged_kv'"), std::string::npos)
      << s.message();
  EXPECT_EQ(bytes, "untouched");
  // The same store under a kind the codec knows is encoded.
  KvCache kv(1, 2);
  ASSERT_TRUE(kv.Append(ForwardColumns::Dense(1, 2), x.data(), x.data()).ok());
  EXPECT_TRUE(EncodeCache(kv, &bytes).ok());
  std::unique_ptr<Cache> back;
  ASSERT_TRUE(DecodeCache(bytes, &back).ok());
  EXPECT_EQ(back->kind(), "kv");
}

// ------------------------------------------------------------ exact refusals
// Each refusal of the codec's own framing, with its exact message (the
// offset included): input damaged in only that respect would, if the check
// were lost, be refused later with another message or be accepted.

// A layout of a kv, a ring and a recurrent layer after a window, padded.
std::string EncodedHybridLayout(std::unique_ptr<Layout>* layout) {
  std::vector<LayerConfig> layers(3);
  layers[0].name = "k";
  layers[1].name = "r";
  layers[1].kind = CacheKind::kRotating;
  layers[1].window = 2;
  layers[2].name = "s";
  layers[2].kind = CacheKind::kSsm;
  EXPECT_TRUE(Layout::Create(2, layers, layout).ok());
  ForwardColumns cols = ForwardColumns::Dense(2, 3);
  cols.left[0] = 1;
  const Status forward = layout_test::RunForward(**layout, cols);
  EXPECT_TRUE(forward.ok()) << forward.message();
  std::string bytes;
  EXPECT_TRUE(EncodeLayout(**layout, &bytes).ok());
  return bytes;
}

void ExpectCacheRefused(const std::string& bytes, const std::string& message) {
  std::unique_ptr<Cache> out;
  const Status s = DecodeCache(bytes, &out);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), message);
  EXPECT_EQ(out, nullptr);
}

void ExpectLayoutRefused(const std::string& bytes, const std::string& message) {
  std::unique_ptr<Layout> out;
  const Status s = DecodeLayout(bytes, &out);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), message);
  EXPECT_EQ(out, nullptr);
}

TEST(CodecRefusals, ALayoutIsNotACacheAndACacheIsNotALayout) {
  std::unique_ptr<Layout> layout;
  const std::string bytes = EncodedHybridLayout(&layout);
  std::string cache;
  ASSERT_TRUE(EncodeCache(layout->cache(0), &cache).ok());
  ExpectCacheRefused(bytes, "bad encoding at byte 4: not a kvspec cache");
  ExpectLayoutRefused(cache, "bad encoding at byte 4: not a kvspec layout");
}

// One byte more than the encoding is refused where the encoding ends; the
// encoding itself decodes.
TEST(CodecRefusals, TrailingBytesAfterACacheOrALayout) {
  std::unique_ptr<Layout> layout, back;
  const std::string bytes = EncodedHybridLayout(&layout);
  ASSERT_TRUE(DecodeLayout(bytes, &back).ok());
  ExpectLayoutRefused(bytes + '\0', "bad encoding at byte " + std::to_string(bytes.size()) +
                                        ": trailing bytes after the layout");
  for (size_t layer = 0; layer < layout->size(); ++layer) {
    SCOPED_TRACE(layout->cache(layer).kind());
    std::string cache;
    ASSERT_TRUE(EncodeCache(layout->cache(layer), &cache).ok());
    std::unique_ptr<Cache> decoded;
    ASSERT_TRUE(DecodeCache(cache, &decoded).ok());
    ExpectCacheRefused(cache + '\x01', "bad encoding at byte " + std::to_string(cache.size()) +
                                           ": trailing bytes after the cache");
  }
}

// Each layer's cache is framed by its u64 length, written in the 8 bytes
// before the cache's magic. A length past the input is refused (where the
// cache starts); a length that takes the next byte in is refused as the
// cache's trailing bytes; exactly the rest of the input is the latter too.
TEST(CodecRefusals, ALayerCacheLengthThatDoesNotFrameTheCache) {
  std::unique_ptr<Layout> layout;
  const std::string bytes = EncodedHybridLayout(&layout);
  std::string cache;
  ASSERT_TRUE(EncodeCache(layout->cache(0), &cache).ok());
  const size_t at = bytes.find("KVSC");  // layer 0's cache
  ASSERT_NE(at, std::string::npos);
  ASSERT_GE(at, 8u);
  uint64_t length = 0;
  std::memcpy(&length, &bytes[at - 8], 8);
  ASSERT_EQ(length, cache.size());
  ASSERT_EQ(bytes.compare(at, cache.size(), cache), 0);

  const auto with_length = [&](uint64_t n) {
    std::string damaged = bytes;
    std::memcpy(&damaged[at - 8], &n, 8);
    return damaged;
  };
  const std::string where = std::to_string(at);
  ExpectLayoutRefused(with_length(bytes.size() - at + 1),
                      "bad encoding at byte " + where + ": layer cache longer than the input");
  ExpectLayoutRefused(with_length(~uint64_t{0}),
                      "bad encoding at byte " + where + ": layer cache longer than the input");
  ExpectLayoutRefused(with_length(bytes.size() - at),
                      "layer 0 (at byte " + where + "): trailing bytes in a layer's cache");
  ExpectLayoutRefused(with_length(length + 1),
                      "layer 0 (at byte " + where + "): trailing bytes in a layer's cache");
}

// A layout's header is its magic, version, rows and layer count (4 bytes
// each); every layer then takes at least 52 bytes (an empty name's u32
// length, ten int32 fields, its cache's u64 length). The decoder reserves
// the layer lists from the count, so it first refuses a count the rest of
// the input cannot hold at 52 bytes a layer, as the layer list; over every
// count up to the read bound, exactly those are refused so, and the rest
// (more layers than were written) are refused by what they then misread.
TEST(CodecRefusals, ALayerCountTheInputCannotHoldIsRefusedBeforeTheListsAreReserved) {
  std::unique_ptr<Layout> layout;
  const std::string bytes = EncodedHybridLayout(&layout);
  constexpr size_t kCountAt = 12, kMinLayer = 4 + 10 * 4 + 8;
  uint32_t count = 0;
  std::memcpy(&count, &bytes[kCountAt], 4);
  ASSERT_EQ(count, layout->size());
  const size_t left = bytes.size() - (kCountAt + 4);
  ASSERT_LT(left / kMinLayer, 1024u);
  const std::string list = "bad encoding at byte 16: layer list larger than the input";
  size_t refused_as_list = 0;
  for (uint32_t n = count + 1; n <= 1024; ++n) {
    SCOPED_TRACE("layer count " + std::to_string(n));
    std::string damaged = bytes;
    std::memcpy(&damaged[kCountAt], &n, 4);
    std::unique_ptr<Layout> out;
    const Status s = DecodeLayout(damaged, &out);
    ASSERT_FALSE(s.ok());
    ASSERT_EQ(out, nullptr);
    if (n > left / kMinLayer) {
      EXPECT_EQ(s.message(), list);
    } else {
      EXPECT_NE(s.message(), list);
    }
    refused_as_list += s.message() == list;
  }
  EXPECT_EQ(refused_as_list, 1024 - left / kMinLayer);
}

// The key heads of a recurrent cache must divide its value heads: the field
// is found as the first byte where the encodings of two caches that differ
// only in key heads differ.
TEST(CodecRefusals, KeyHeadsThatDoNotDivideTheValueHeads) {
  SsmShape one;
  one.value_heads = 4;
  one.key_heads = 1;
  SsmShape two = one;
  two.key_heads = 2;
  std::string a, b;
  ASSERT_TRUE(EncodeCache(SsmCache(one), &a).ok());
  ASSERT_TRUE(EncodeCache(SsmCache(two), &b).ok());
  size_t at = 0;
  while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
  ASSERT_LE(at + 4, b.size());
  int32_t field = 0;
  std::memcpy(&field, &b[at], 4);
  ASSERT_EQ(field, 2);
  std::memcpy(&field, &b[at - 4], 4);
  ASSERT_EQ(field, 4);  // the value heads just before
  std::unique_ptr<Cache> decoded;
  ASSERT_TRUE(DecodeCache(b, &decoded).ok());

  std::string damaged = b;
  const int32_t three = 3;
  std::memcpy(&damaged[at], &three, 4);
  // Refused once the shape is read: key heads, dk, dv, conv (i32) and the
  // gate flag (one byte).
  ExpectCacheRefused(damaged, "bad encoding at byte " + std::to_string(at + 4 * 4 + 1) +
                                  ": value heads not a multiple of key heads");
}

}  // namespace
}  // namespace kvspec
