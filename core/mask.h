// Decode and window masks in physical slot order.
//
// A mask admits slot s of row r to query q when the position stored in that
// slot lies in the query's visible range: lo[r][q] <= slot_pos[r][s] <=
// hi[r][q]. slot_pos is the cache's own per-slot position array in physical
// order (-1 for a slot that holds no visible token: padding, a dropped tip,
// an unwritten slot), so a wrapped ring is read in place. A layout builds
// one mask per forward and per distinct window and every layer of that
// window reads it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cache.h"

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

// Builds the mask of the forward `cols` that was just appended to a cache
// whose rows now have next positions `next` (so the forward's real tokens
// of row r are next[r] - Real(r) .. next[r] - 1), over the cache's slot
// positions.
Mask BuildMask(const ForwardColumns& cols, const std::vector<int32_t>& next,
               int32_t window, const int32_t* slot_pos, size_t slot_stride,
               int32_t slots, int32_t first_slot = 0);

// The mask of that forward over a cache's view.
Mask BuildMask(const ForwardColumns& cols, const std::vector<int32_t>& next,
               int32_t window, const struct KvView& view);

}  // namespace kvspec
