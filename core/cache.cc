#include "core/cache.h"

namespace kvspec {

bool IsPlainKvCache(std::string_view kind) {
  return kind == kKindKv || kind == kKindBatchedKv;
}
bool IsRotatingCache(std::string_view kind) {
  return kind == kKindRotating || kind == kKindBatchedRotating;
}
bool IsRecurrentCache(std::string_view kind) {
  return kind == kKindSsm || kind == kKindBatchedSsm;
}
bool IsAttentionCache(std::string_view kind) {
  return IsPlainKvCache(kind) || IsRotatingCache(kind);
}
bool IsBatchedCache(std::string_view kind) {
  return kind == kKindBatchedKv || kind == kKindBatchedRotating ||
         kind == kKindBatchedSsm;
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
