// The cache interface every kind implements, kind strings and capability
// predicates, and the column model shared by every batched cache.
//
// Column model (docs/TRACE.md, "Columns and wrap"): a batch is
// rectangular. Every forward adds L columns to every row; row r's first
// left[r] columns are left padding (allowed only while the row holds no
// token) and its last right[r] are prepared prefill padding. A row's real
// tokens have positions 0, 1, 2, ... in column order; padding has none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvspec/base/kind.h"
#include "kvspec/base/status.h"

namespace kvspec {

// Capability predicates on kind strings (base/kind.h): they fail closed,
// anything not listed is not capable.

bool IsPlainKvCache(std::string_view kind);      // kv, batched_kv
bool IsRotatingCache(std::string_view kind);     // rotating, batched_rotating
bool IsRecurrentCache(std::string_view kind);    // ssm, batched_ssm
bool IsAttentionCache(std::string_view kind);    // plain kv or rotating
bool IsBatchedCache(std::string_view kind);      // batched_*

// The largest position and column count (they are int32 in masks, slot
// positions and the persistence format): a forward that would go past it is
// refused, and the codec refuses states beyond it.
inline constexpr int64_t kMaxPosition = 2147483647;  // 2^31 - 1

// ---------------------------------------------------------------------------
// One forward's columns: L per row, with per-row padding.
struct ForwardColumns {
  int32_t columns = 1;          // L >= 1
  std::vector<int32_t> left;    // [rows] leading pad columns
  std::vector<int32_t> right;   // [rows] trailing pad columns (prepared padding)
  bool decode = false;          // a decode step (L = 1), not a window

  int32_t Real(size_t row) const { return columns - left[row] - right[row]; }
  // A forward of L columns with no padding on `rows` rows.
  static ForwardColumns Dense(int rows, int32_t columns, bool decode = false);
};

// RoPE offset: every row's next position. A static integer when all rows
// agree, else a per-row array. The array is a value: a copy someone holds
// never changes afterwards.
struct RopeOffset {
  bool is_static = true;
  int32_t value = 0;            // when is_static; 0 when the rows differ
  std::vector<int32_t> per_row; // always filled, [rows]
};

// The hash of state comparisons (Layout::StateHash, `expect error`'s
// "state unchanged", the codec's round trips): bit-identical states hash
// alike. A word at a time (the runner compares whole layouts around every
// refusal; a byte at a time was most of fuzz_trace_parse's time): each 8
// bytes, as a little-endian word w, make h = (h ^ w) * 0x9E3779B97F4A7C15,
// then h ^= h >> 32; the last 1 to 7 bytes of a Bytes() call make one word
// with their count in its top byte. h starts at 0xCBF29CE484222325.
// (`state` lines print trace::WordHasher's hash, not this one.)
class Hasher {
 public:
  void Bytes(const void* data, size_t size) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      Word(w);
    }
    if (i < size) {
      uint64_t w = static_cast<uint64_t>(size - i) << 56;
      for (size_t j = 0; i + j < size; ++j) w |= static_cast<uint64_t>(p[i + j]) << (8 * j);
      Word(w);
    }
  }
  template <class T>
  void Value(const T& v) { Bytes(&v, sizeof(v)); }
  template <class T, class A>
  void Vector(const std::vector<T, A>& v) {
    Value(static_cast<uint64_t>(v.size()));
    if (!v.empty()) Bytes(v.data(), v.size() * sizeof(T));
  }
  uint64_t value() const { return value_; }

 private:
  void Word(uint64_t w) {
    value_ = (value_ ^ w) * 0x9E3779B97F4A7C15ull;
    value_ ^= value_ >> 32;
  }
  uint64_t value_ = 0xCBF29CE484222325ull;
};

class AttentionCache;
class ColumnStore;
class SsmCacheBase;

// ---------------------------------------------------------------------------
class Cache {
 public:
  virtual ~Cache() = default;

  // This cache as one of the library's cache families, or null: what a
  // dynamic_cast to that class gives (the families override them), without
  // its cost on every call of a layout's hot paths.
  virtual const AttentionCache* AsAttention() const { return nullptr; }
  virtual const ColumnStore* AsColumnStore() const { return nullptr; }
  virtual const SsmCacheBase* AsRecurrent() const { return nullptr; }

  // The stable kind string. Concrete caches get it from WithKind<> below,
  // so a type that does not declare its kKind does not compile.
  virtual std::string kind() const = 0;
  virtual int rows() const = 0;
  // Columns held per row (pads included).
  virtual int64_t columns() const = 0;
  // Each row's next position (its real token count).
  virtual std::vector<int32_t> positions() const = 0;
  // The same, without a copy (the invariant checks compare them after
  // every operation).
  virtual const std::vector<int32_t>& positionsRef() const = 0;
  RopeOffset ropeOffset() const;

  // Physical bytes one more token costs one row.
  virtual size_t bytesPerToken() const = 0;
  // Bytes of storage currently allocated.
  virtual size_t allocatedBytes() const = 0;

  virtual bool isTrimmable() const = 0;
  // Whether trim(n, bypass) would be accepted; changes nothing.
  virtual Status CheckTrim(int32_t n, bool bypass) const = 0;
  // Drops the last n real tokens of every row. Without bypass refused
  // unless isTrimmable(); with bypass valid only right after a window write
  // of at least n real tokens in every row. Refused: changes nothing.
  virtual Status trim(int32_t n, bool bypass = false) = 0;

  // Feeds every byte of the cache's state (storage, counters, phase) to
  // *hasher: two caches hash alike when they are bit-identical.
  virtual void HashState(Hasher* hasher) const = 0;

  // An explicit deep copy.
  virtual std::unique_ptr<Cache> Copy() const = 0;

  // Checks the invariants stated at the implementing class (core/invariants.h);
  // an error names the first broken one. A cache that states none (a test's
  // stand-in) has none to check.
  virtual Status CheckInvariants() const { return Status::Ok(); }
};

// Gives a concrete cache its kind() from `static constexpr std::string_view
// kKind` of Derived; forgetting kKind (or leaving it empty) fails to compile.
template <class Derived, class Base>
class WithKind : public Base {
 public:
  using Base::Base;
  std::string kind() const final {
    static_assert(!Derived::kKind.empty(), "a cache kind must not be empty");
    return std::string(Derived::kKind);
  }
};

}  // namespace kvspec
