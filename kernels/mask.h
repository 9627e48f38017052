// The mask the attention kernel reads, in physical slot order: which stored
// slots each query of a forward admits (core/mask_builder.h builds it from a
// cache's positions). Plain types only; no cache code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvspec {

// Window 0 means none: the query sees every earlier position.
inline constexpr int32_t kNoWindow = 0;

struct Mask {
  int32_t window = kNoWindow;
  int rows = 0;
  int32_t queries = 0;           // L of the forward
  const int32_t* slot_pos = nullptr;  // [rows][slot_stride], physical order
  size_t slot_stride = 0;
  int32_t slots = 0;             // slots to scan per row
  // Logical (position) order of the slots: first_slot .. slots-1, then
  // 0 .. first_slot-1. Kernels accumulate in this order, so a row's output
  // does not depend on the ring's phase.
  int32_t first_slot = 0;
  std::vector<int32_t> query_pos;  // [rows][queries], -1: a pad query
  std::vector<int32_t> lo, hi;     // [rows][queries]; empty when lo > hi

  bool Admits(int row, int32_t query, int32_t slot) const {
    const size_t rq = static_cast<size_t>(row) * queries + query;
    const int32_t p = slot_pos[static_cast<size_t>(row) * slot_stride + slot];
    return p >= lo[rq] && p <= hi[rq];
  }
};

}  // namespace kvspec
