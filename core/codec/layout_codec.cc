// Codec of layouts: the header, each layer's config and cache, then the
// layout's own state (bypass bound and round).
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvspec/core/codec/cache_codec.h"
#include "kvspec/core/codec/codec.h"
#include "kvspec/core/invariants.h"
#include "kvspec/kernels/conv1d.h"

namespace kvspec {

using namespace codec_internal;  // NOLINT: the format's bounds and byte I/O

namespace {

// The fewest bytes one layer takes: an empty name's length, ten int32
// fields and the u64 length of its cache.
constexpr size_t kMinLayerBytes = sizeof(uint32_t) + 10 * sizeof(int32_t) + sizeof(uint64_t);

void WriteLayerConfig(const LayerConfig& c, Writer& w) {
  w.String(c.name);
  w.Value<int32_t>(static_cast<int32_t>(c.kind));
  w.Value<int32_t>(c.heads);
  w.Value<int32_t>(c.q_heads);
  w.Value<int32_t>(c.dim);
  w.Value<int32_t>(c.window);
  w.Value<int32_t>(c.capacity);
  w.Value<int32_t>(c.kheads);
  w.Value<int32_t>(c.dk);
  w.Value<int32_t>(c.dv);
  w.Value<int32_t>(c.conv);
  w.Value<uint8_t>(static_cast<uint8_t>(c.kv));
}

// A layer's config, each field within the format's bounds; whether it
// describes the layer's cache is the layout's invariant.
bool ReadLayerConfig(Reader& r, LayerConfig* c) {
  int32_t type = 0;
  r.String(&c->name, kMaxStringRead);
  r.Int(&type, 0, 2, "layer type");
  r.Int(&c->heads, 1, kMaxHeadsRead, "heads");
  r.Int(&c->q_heads, 0, kMaxHeadsRead, "query heads");
  r.Int(&c->dim, 1, kMaxDimRead, "dim");
  r.Int(&c->window, 0, kMaxWindowRead, "window");
  r.Int(&c->capacity, 0, kMaxWindowRead, "capacity");
  r.Int(&c->kheads, 0, kMaxHeadsRead, "key heads");
  r.Int(&c->dk, 1, kMaxDimRead, "dk");
  r.Int(&c->dv, 1, kMaxDimRead, "dv");
  r.Int(&c->conv, 1, static_cast<int64_t>(kMaxConvKernel), "conv");
  uint8_t kv = 0;  // version 1: fp32 only
  if (r.version() >= 2) r.Int(&kv, 0, static_cast<int64_t>(KvType::kQ4_0), "storage type");
  c->kind = static_cast<CacheKind>(type);
  c->kv = static_cast<KvType>(kv);
  return r.ok();
}

// One layer's cache: u64 length, then exactly that many bytes of cache.
Status ReadLayerCache(Reader& r, std::string_view bytes, uint32_t layer,
                      std::unique_ptr<Cache>* out) {
  uint64_t length = 0;
  if (!r.Value(&length)) return r.status();
  if (length > r.left()) return r.Fail("layer cache longer than the input"), r.status();
  Reader sub(bytes.substr(r.offset(), static_cast<size_t>(length)));
  Status s = CacheCodec::DecodeCacheFrom(sub, out);
  if (s.ok() && sub.left() != 0) s = Status::Error("trailing bytes in a layer's cache");
  if (s.ok() && sub.version() != r.version()) {
    s = Status::Error("a cache of version " + std::to_string(sub.version()) +
                      " in a layout of version " + std::to_string(r.version()));
  }
  if (!s.ok()) {
    return Status::Error("layer " + std::to_string(layer) + " (at byte " +
                         std::to_string(r.offset()) + "): " + s.message());
  }
  r.Skip(static_cast<size_t>(length));
  return Status::Ok();
}

}  // namespace

void CacheCodec::EncodeLayoutState(const Layout& l, Writer& w) {
  w.Vector(l.bypass_bound_);
  w.Value<uint8_t>(l.armed_ ? 1 : 0);
  w.Value<uint8_t>(l.verified_ ? 1 : 0);
  w.Vector(l.verify_real_);
}

Status CacheCodec::DecodeLayoutState(Reader& r, int rows, std::vector<LayerConfig> configs,
                                     std::vector<std::unique_ptr<Cache>> caches,
                                     std::unique_ptr<Layout>* out) {
  std::unique_ptr<Layout> l(new Layout());
  l->rows_ = rows;
  l->configs_ = std::move(configs);
  l->layers_ = std::move(caches);
  l->mask_of_layer_.assign(l->layers_.size(), -1);
  r.Vector(&l->bypass_bound_, -1, "bypass bound");
  r.Bool(&l->armed_);
  r.Bool(&l->verified_);
  r.Vector(&l->verify_real_, -1, "verify sizes");
  if (!r.ok()) return r.status();
  if (r.left() != 0) return r.Fail("trailing bytes after the layout"), r.status();
  // The configs must describe the decoded caches (whose sizes the input
  // bounded), the layers be in lockstep and the round state consistent.
  KVSPEC_RETURN_IF_ERROR(l->CheckInvariants());
  *out = std::move(l);
  return Status::Ok();
}

Status EncodeLayout(const Layout& layout, std::string* out) {
  return RefuseOnAllocationFailure("EncodeLayout", [&]() -> Status {
    std::string bytes;
    // One allocation, not one per doubling (a hint: storage plus headers).
    bytes.reserve(layout.allocatedBytes() + 1024 +
                  64 * layout.size() * static_cast<size_t>(layout.rows()));
    Writer w(&bytes);
    w.Raw(kLayoutMagic, 4);
    w.Value<uint32_t>(kCodecVersion);
    w.Value<int32_t>(layout.rows());
    w.Value<uint32_t>(static_cast<uint32_t>(layout.size()));
    for (size_t i = 0; i < layout.size(); ++i) {
      WriteLayerConfig(CacheCodec::Configs(layout)[i], w);
      // The cache's length, then the cache (EncodeCache's bytes) written in
      // place; the length is filled in after it.
      const size_t at = bytes.size();
      w.Value<uint64_t>(0);
      KVSPEC_RETURN_IF_ERROR(CacheCodec::EncodeCacheTo(layout.cache(i), &bytes));
      const uint64_t length = bytes.size() - at - sizeof(uint64_t);
      std::memcpy(&bytes[at], &length, sizeof(length));  // little-endian, as Writer::Value
    }
    CacheCodec::EncodeLayoutState(layout, w);
    out->swap(bytes);
    return Status::Ok();
  });
}

Status DecodeLayout(std::string_view bytes, std::unique_ptr<Layout>* out) {
  return RefuseOnAllocationFailure("DecodeLayout", [&]() -> Status {
    Reader r(bytes);
    char magic[4];
    uint32_t version = 0, layers = 0;
    int32_t rows = 0;
    r.Raw(magic, 4);
    if (r.ok() && std::memcmp(magic, kLayoutMagic, 4) != 0) r.Fail("not a kvspec layout");
    r.Value(&version);
    if (r.ok() && (version < kOldestCodecVersion || version > kCodecVersion)) {
      r.Fail("unsupported version " + std::to_string(version));
    }
    r.set_version(version);
    r.Int(&rows, 1, kMaxRowsRead, "rows");
    r.Int(&layers, 1, kMaxLayersRead, "layers");
    // Each layer takes at least its config's fixed fields and its cache's
    // length in the input: the lists are reserved once, bounded by the input.
    r.Holds(layers, kMinLayerBytes, "layer list");
    if (!r.ok()) return r.status();
    std::vector<LayerConfig> configs;
    std::vector<std::unique_ptr<Cache>> caches;
    configs.reserve(layers);
    caches.reserve(layers);
    for (uint32_t i = 0; i < layers; ++i) {
      LayerConfig c;
      if (!ReadLayerConfig(r, &c)) return r.status();
      std::unique_ptr<Cache> cache;
      KVSPEC_RETURN_IF_ERROR(ReadLayerCache(r, bytes, i, &cache));
      configs.push_back(std::move(c));
      caches.push_back(std::move(cache));
    }
    return CacheCodec::DecodeLayoutState(r, rows, std::move(configs), std::move(caches), out);
  });
}

}  // namespace kvspec
