#include "kvspec/core/cache.h"

namespace kvspec {

namespace {
// Whether `text` is a kind string of `kind` (batched or not).
bool IsKind(std::string_view text, CacheKind kind) {
  CacheKind k = CacheKind::kKv;
  bool batched = false;
  return ParseKindString(text, &k, &batched) && k == kind;
}
}  // namespace

bool IsPlainKvCache(std::string_view kind) { return IsKind(kind, CacheKind::kKv); }
bool IsRotatingCache(std::string_view kind) { return IsKind(kind, CacheKind::kRotating); }
bool IsRecurrentCache(std::string_view kind) { return IsKind(kind, CacheKind::kSsm); }
bool IsAttentionCache(std::string_view kind) {
  return IsPlainKvCache(kind) || IsRotatingCache(kind);
}
bool IsBatchedCache(std::string_view kind) {
  CacheKind k = CacheKind::kKv;
  bool batched = false;
  return ParseKindString(kind, &k, &batched) && batched;
}

ForwardColumns ForwardColumns::Dense(int rows, int32_t columns, bool decode) {
  ForwardColumns c;
  c.columns = columns;
  c.left.assign(static_cast<size_t>(rows), 0);
  c.right.assign(static_cast<size_t>(rows), 0);
  c.decode = decode;
  return c;
}

RopeOffset Cache::ropeOffset() const {
  RopeOffset r;
  r.per_row = positions();
  r.is_static = true;
  r.value = r.per_row.empty() ? 0 : r.per_row[0];
  for (int32_t p : r.per_row) {
    if (p != r.value) r.is_static = false;
  }
  if (!r.is_static) r.value = 0;
  return r;
}

}  // namespace kvspec
