// The byte reader and writer of the persistence format (core/codec/codec.h),
// its magic numbers and the sanity bounds on shapes read from input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kvspec/base/status.h"

namespace kvspec {
namespace codec_internal {

inline constexpr char kCacheMagic[4] = {'K', 'V', 'S', 'C'};
inline constexpr char kLayoutMagic[4] = {'K', 'V', 'S', 'L'};
// Sanity bounds on shapes read from input (sizes are further bounded by the
// bytes actually present).
inline constexpr int64_t kMaxRowsRead = 1 << 16;
inline constexpr int64_t kMaxHeadsRead = 1 << 12;
inline constexpr int64_t kMaxDimRead = 1 << 16;
inline constexpr int64_t kMaxWindowRead = int64_t{1} << 30;
inline constexpr uint32_t kMaxStringRead = 256;
inline constexpr uint32_t kMaxLayersRead = 1024;

class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}
  void Raw(const void* p, size_t n) { out_->append(static_cast<const char*>(p), n); }
  template <class T>
  void Value(T v) {
    // The format is little-endian; so are the machines this builds for.
    static_assert(std::is_trivially_copyable<T>::value, "plain values only");
    Raw(&v, sizeof(v));
  }
  void String(const std::string& s) {
    Value<uint32_t>(static_cast<uint32_t>(s.size()));
    Raw(s.data(), s.size());
  }
  template <class T, class A>
  void Vector(const std::vector<T, A>& v) {
    Value<uint64_t>(v.size());
    if (!v.empty()) Raw(v.data(), v.size() * sizeof(T));
  }

 private:
  std::string* out_;
};

class Reader {
 public:
  explicit Reader(std::string_view bytes) : b_(bytes) {}

  bool ok() const { return error_.empty(); }
  size_t left() const { return b_.size() - at_; }
  size_t offset() const { return at_; }
  // The format version the header read (older versions lack some fields).
  uint32_t version() const { return version_; }
  void set_version(uint32_t version) { version_ = version; }
  Status status() const { return ok() ? Status::Ok() : Status::Error(error_); }

  bool Fail(const std::string& what) {
    if (ok()) error_ = "bad encoding at byte " + std::to_string(at_) + ": " + what;
    return false;
  }
  bool Raw(void* p, size_t n) {
    if (!ok()) return false;
    if (n > left()) return Fail("truncated (" + std::to_string(n) + " bytes needed, " +
                                std::to_string(left()) + " left)");
    std::memcpy(p, b_.data() + at_, n);
    at_ += n;
    return true;
  }
  template <class T>
  bool Value(T* v) {
    return Raw(v, sizeof(T));
  }
  // An integer that must lie in [lo, hi].
  template <class T>
  bool Int(T* v, int64_t lo, int64_t hi, const char* name) {
    if (!Value(v)) return false;
    if (static_cast<int64_t>(*v) < lo || static_cast<int64_t>(*v) > hi) {
      return Fail(std::string(name) + " " + std::to_string(static_cast<int64_t>(*v)) +
                  " outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return true;
  }
  // Whether `count` elements of `element_bytes` each can still follow in
  // the input: what a decoder checks before it allocates for them.
  bool Holds(int64_t count, size_t element_bytes, const char* what) {
    if (!ok()) return false;
    if (count < 0 || static_cast<uint64_t>(count) > left() / element_bytes) {
      return Fail(std::string(what) + " larger than the input");
    }
    return true;
  }
  bool Skip(size_t n) {
    if (!ok()) return false;
    if (n > left()) return Fail("truncated");
    at_ += n;
    return true;
  }
  bool Bool(bool* v) {
    uint8_t b = 0;
    if (!Value(&b)) return false;
    if (b > 1) return Fail("a boolean byte holds " + std::to_string(b));
    *v = b == 1;
    return true;
  }
  bool String(std::string* s, uint32_t max) {
    uint32_t n = 0;
    if (!Value(&n)) return false;
    if (n > max) return Fail("string of " + std::to_string(n) + " bytes (at most " +
                             std::to_string(max) + ")");
    if (n > left()) {
      return Fail("string of " + std::to_string(n) + " bytes, more than the input holds");
    }
    s->resize(n);
    return n == 0 || Raw(&(*s)[0], n);
  }
  // A vector whose element count must equal `expected` (when >= 0); the
  // count is checked against the bytes left before allocating.
  template <class T, class A>
  bool Vector(std::vector<T, A>* v, int64_t expected, const char* name) {
    uint64_t n = 0;
    if (!Value(&n)) return false;
    if (expected >= 0 && n != static_cast<uint64_t>(expected)) {
      return Fail(std::string(name) + " holds " + std::to_string(n) + " values, " +
                  std::to_string(expected) + " expected");
    }
    if (n > left() / sizeof(T)) {
      return Fail(std::string(name) + " claims " + std::to_string(n) +
                  " values, more than the input holds");
    }
    v->resize(static_cast<size_t>(n));
    return n == 0 || Raw(v->data(), static_cast<size_t>(n) * sizeof(T));
  }
  // A byte vector encoded as a count of `unit`-byte values, then the bytes.
  template <class A>
  bool Bytes(std::vector<uint8_t, A>* v, size_t unit, const char* name) {
    uint64_t n = 0;
    if (!Value(&n)) return false;
    if (n > left() / unit) {
      return Fail(std::string(name) + " claims " + std::to_string(n) +
                  " values, more than the input holds");
    }
    v->resize(static_cast<size_t>(n) * unit);
    return n == 0 || Raw(v->data(), v->size());
  }

 private:
  std::string_view b_;
  size_t at_ = 0;
  uint32_t version_ = 0;
  std::string error_;
};

// a * b * ... without overflow, or -1.
inline int64_t Product(std::initializer_list<int64_t> factors) {
  int64_t p = 1;
  for (int64_t f : factors) {
    if (f < 0) return -1;
    if (f != 0 && p > std::numeric_limits<int64_t>::max() / f) return -1;
    p *= f;
  }
  return p;
}

}  // namespace codec_internal
}  // namespace kvspec
