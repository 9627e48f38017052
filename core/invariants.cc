// What the invariant checks of the column store (core/kv_cache.cc), the
// recurrent caches (core/ssm_cache.cc) and the layout (core/layout.cc)
// share: the abort of a broken invariant, the fatal path, and the wording
// of a broken invariant.
#include "kvspec/core/invariants.h"
#include "kvspec/core/invariants_internal.h"

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <string>

namespace kvspec {

void InvariantBroken(const char* operation, const std::string& message, const char* file,
                     int line) {
  std::fprintf(stderr, "kvspec: invariant broken after %s (%s:%d): %s\n", operation, file, line,
               message.c_str());
  std::fflush(stderr);
  std::abort();
}

void Fatal(const char* operation, const std::string& message) {
  std::fprintf(stderr, "kvspec: fatal in %s: %s\n", operation, message.c_str());
  std::fflush(stderr);
  std::abort();
}

namespace invariants {

Status Broken(const char* type, int invariant, const std::string& what) {
  return Status::Error(what + " (" + type + " invariant " + std::to_string(invariant) + ")");
}

// a * b * ..., or the largest size_t when that overflows (no buffer is that
// large, so a size compared with it never matches).
size_t ProductOrMax(std::initializer_list<size_t> factors) {
  size_t p = 1;
  for (size_t f : factors) {
    if (__builtin_mul_overflow(p, f, &p)) return std::numeric_limits<size_t>::max();
  }
  return p;
}

// "NAME holds N values, M expected" unless `actual` is `expected`.
Status SizeIs(const char* type, int invariant, const char* name, size_t actual,
              size_t expected) {
  if (actual == expected) return Status::Ok();
  return Broken(type, invariant,
                std::string(name) + " holds " + std::to_string(actual) + " values, " +
                    std::to_string(expected) + " expected");
}

std::string RowText(int row) { return "row " + std::to_string(row); }

}  // namespace invariants
}  // namespace kvspec
