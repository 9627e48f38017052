// The codec's entry points for single caches (core/codec/codec.h); the
// per-kind codecs are in column_codec.cc and ssm_codec.cc, layouts in
// layout_codec.cc.
#include "kvspec/core/codec/codec.h"

#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "kvspec/core/codec/cache_codec.h"
#include "kvspec/core/invariants.h"

namespace kvspec {

using namespace codec_internal;  // NOLINT: the format's bounds and byte I/O

bool HasCodec(std::string_view kind) {
  return IsPlainKvCache(kind) || IsRotatingCache(kind) || IsRecurrentCache(kind);
}

Status CacheCodec::EncodeCacheTo(const Cache& cache, std::string* bytes) {
  const std::string kind = cache.kind();
  if (!HasCodec(kind)) return Status::Error("no codec for cache kind '" + kind + "'");
  const auto* store = cache.AsColumnStore();
  const auto* ssm = cache.AsRecurrent();
  if (IsRecurrentCache(kind) ? !ssm : !store) {
    return Status::Error("cache of kind '" + kind + "' is not what its kind says");
  }
  Writer w(bytes);
  w.Raw(kCacheMagic, 4);
  w.Value<uint32_t>(kCodecVersion);
  w.String(kind);
  if (ssm) {
    EncodeSsm(*ssm, w);
  } else {
    EncodeColumns(*store, w);
  }
  return Status::Ok();
}

Status EncodeCache(const Cache& cache, std::string* out) {
  return RefuseOnAllocationFailure("EncodeCache", [&]() -> Status {
    std::string bytes;
    // One allocation, not one per doubling (a hint: storage plus headers).
    bytes.reserve(cache.allocatedBytes() + 256 + 16 * static_cast<size_t>(cache.rows()));
    KVSPEC_RETURN_IF_ERROR(CacheCodec::EncodeCacheTo(cache, &bytes));
    out->swap(bytes);
    return Status::Ok();
  });
}

Status CacheCodec::DecodeCacheFrom(Reader& r, std::unique_ptr<Cache>* out) {
  char magic[4];
  uint32_t version = 0;
  std::string kind;
  r.Raw(magic, 4);
  if (r.ok() && std::memcmp(magic, kCacheMagic, 4) != 0) r.Fail("not a kvspec cache");
  r.Value(&version);
  if (r.ok() && (version < kOldestCodecVersion || version > kCodecVersion)) {
    r.Fail("unsupported version " + std::to_string(version));
  }
  r.set_version(version);
  r.String(&kind, kMaxStringRead);
  if (!r.ok()) return r.status();
  if (!HasCodec(kind)) return Status::Error("no codec for cache kind '" + kind + "'");
  const bool batched = IsBatchedCache(kind);
  if (IsRecurrentCache(kind)) return DecodeSsm(r, batched, out);
  return DecodeColumns(r, batched, IsRotatingCache(kind), out);
}

Status DecodeCache(std::string_view bytes, std::unique_ptr<Cache>* out) {
  return RefuseOnAllocationFailure("DecodeCache", [&]() -> Status {
    Reader r(bytes);
    std::unique_ptr<Cache> cache;
    KVSPEC_RETURN_IF_ERROR(CacheCodec::DecodeCacheFrom(r, &cache));
    if (r.left() != 0) return r.Fail("trailing bytes after the cache"), r.status();
    *out = std::move(cache);
    return Status::Ok();
  });
}

}  // namespace kvspec
