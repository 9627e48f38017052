// The wording the invariant checks share (each class's CheckInvariants(),
// in its own .cc; defined in invariants.cc); not part of the API.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>

#include "kvspec/base/status.h"

namespace kvspec::invariants {

// "WHAT (TYPE invariant N)".
Status Broken(const char* type, int invariant, const std::string& what);

// a * b * ..., or the largest size_t when that overflows (no buffer is that
// large, so a size compared with it never matches).
size_t ProductOrMax(std::initializer_list<size_t> factors);

// "NAME holds N values, M expected (TYPE invariant N)" unless `actual` is
// `expected`.
Status SizeIs(const char* type, int invariant, const char* name, size_t actual,
              size_t expected);

// "row N".
std::string RowText(int row);

}  // namespace kvspec::invariants
