// Every replaceable form of the global operator new and delete (plain,
// array, sized, nothrow and aligned), defined in terms of two functions the
// including file provides before it includes this:
//
//   void* ReplacedAllocate(std::size_t n, std::size_t align);
//       align: 0 for the forms without std::align_val_t, else its value;
//       throws std::bad_alloc when it fails
//   void ReplacedRelease(void* p, std::size_t align) noexcept;
//       the block of a ReplacedAllocate with the same align (p may be null)
//
// For the test executables that count or fail allocations
// (core/allocation_failure_test.cc, core/layout_out_of_memory_test.cc,
// fuzz/fuzz_codec_decode.cc): a form left to the runtime allocates where the
// replacement does not count, or frees a block the replacement allocated
// (ASan: alloc-dealloc-mismatch). Include it in one translation unit of an
// executable: it defines the functions, not only declares them.
#pragma once

#include <cstddef>
#include <new>

void* operator new(std::size_t n) { return ReplacedAllocate(n, 0); }
void* operator new[](std::size_t n) { return ReplacedAllocate(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) {
  return ReplacedAllocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return ReplacedAllocate(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return ReplacedAllocate(n, 0);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept {
  return operator new(n, t);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return ReplacedAllocate(n, static_cast<std::size_t>(a));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t& t) noexcept {
  return operator new(n, a, t);
}

void operator delete(void* p) noexcept { ReplacedRelease(p, 0); }
void operator delete[](void* p) noexcept { ReplacedRelease(p, 0); }
void operator delete(void* p, std::size_t) noexcept { ReplacedRelease(p, 0); }
void operator delete[](void* p, std::size_t) noexcept { ReplacedRelease(p, 0); }
void operator delete(void* p, const std::nothrow_t&) noexcept { ReplacedRelease(p, 0); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { ReplacedRelease(p, 0); }
void operator delete(void* p, std::align_val_t a) noexcept {
  ReplacedRelease(p, static_cast<std::size_t>(a));
}
void operator delete[](void* p, std::align_val_t a) noexcept {
  ReplacedRelease(p, static_cast<std::size_t>(a));
}
void operator delete(void* p, std::size_t, std::align_val_t a) noexcept {
  ReplacedRelease(p, static_cast<std::size_t>(a));
}
void operator delete[](void* p, std::size_t, std::align_val_t a) noexcept {
  ReplacedRelease(p, static_cast<std::size_t>(a));
}
void operator delete(void* p, std::align_val_t a, const std::nothrow_t&) noexcept {
  ReplacedRelease(p, static_cast<std::size_t>(a));
}
void operator delete[](void* p, std::align_val_t a, const std::nothrow_t&) noexcept {
  ReplacedRelease(p, static_cast<std::size_t>(a));
}
