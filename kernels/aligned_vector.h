// Storage whose first element starts a cache line: AlignedVector<T> is a
// std::vector<T> whose allocation is aligned to kCacheLine (64) bytes.
//
// The caches keep their rows (keys, values, recurrent states) in these, so
// that a row whose size is a multiple of 64 bytes (every head dim and state
// shape that is a multiple of 16 floats) starts a line: a 512-bit load of it
// touches one line, not two. With std::vector's 16-byte alignment every
// AVX-512 load of such a row straddles two lines: the hot recurrent step
// over 16 heads of 128 x 128 on AVX3 takes about a third longer with its
// state 16 bytes past a line; see docs/benchmarks.md.
#pragma once

#include <cstddef>
#include <limits>
#include <new>
#include <vector>

namespace kvspec {

inline constexpr size_t kCacheLine = 64;

template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() noexcept = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}  // NOLINT: rebinding

  T* allocate(size_t n) {
    if (n > std::numeric_limits<size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kCacheLine}));
  }
  void deallocate(T* p, size_t) noexcept { ::operator delete(p, std::align_val_t{kCacheLine}); }

  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept { return true; }
  template <class U>
  bool operator!=(const CacheLineAllocator<U>&) const noexcept { return false; }
};

template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace kvspec
