// Cache kinds: one enum and its stable strings (docs/trace-runner.md, "Cache kinds").
//
// CacheKind is what a layer is: full attention (kv), a sliding-window ring
// (rotating) or a recurrent gated-DeltaNet state (ssm); it is the KIND word
// of a trace's `layer` line. A cache's kind string is that word, prefixed
// with "batched_" for the multi-row variant. Parsing fails closed: a string
// that is not one of the six is no kind at all.
#pragma once

#include <string_view>

namespace kvspec {

enum class CacheKind { kKv, kRotating, kSsm };

inline constexpr std::string_view kKindKv = "kv";
inline constexpr std::string_view kKindBatchedKv = "batched_kv";
inline constexpr std::string_view kKindRotating = "rotating";
inline constexpr std::string_view kKindBatchedRotating = "batched_rotating";
inline constexpr std::string_view kKindSsm = "ssm";
inline constexpr std::string_view kKindBatchedSsm = "batched_ssm";

// "kv", "rotating" or "ssm": the single-row kind string and the trace word.
constexpr std::string_view KindName(CacheKind kind) {
  switch (kind) {
    case CacheKind::kKv:
      return kKindKv;
    case CacheKind::kRotating:
      return kKindRotating;
    case CacheKind::kSsm:
      return kKindSsm;
  }
  return {};
}

// The stable kind string of a cache of this kind, batched or not.
constexpr std::string_view KindString(CacheKind kind, bool batched) {
  switch (kind) {
    case CacheKind::kKv:
      return batched ? kKindBatchedKv : kKindKv;
    case CacheKind::kRotating:
      return batched ? kKindBatchedRotating : kKindRotating;
    case CacheKind::kSsm:
      return batched ? kKindBatchedSsm : kKindSsm;
  }
  return {};
}

// The kind of a kind string; false (and nothing written) for any other
// string.
constexpr bool ParseKindString(std::string_view text, CacheKind* kind, bool* batched) {
  for (CacheKind k : {CacheKind::kKv, CacheKind::kRotating, CacheKind::kSsm}) {
    for (bool b : {false, true}) {
      if (text == KindString(k, b)) {
        *kind = k;
        *batched = b;
        return true;
      }
    }
  }
  return false;
}

// The kind of a trace's KIND word ("kv", "rotating", "ssm"); false for any
// other word.
constexpr bool ParseKindName(std::string_view text, CacheKind* kind) {
  bool batched = false;
  CacheKind k = CacheKind::kKv;
  if (!ParseKindString(text, &k, &batched) || batched) return false;
  *kind = k;
  return true;
}

}  // namespace kvspec
