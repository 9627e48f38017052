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

#include "kvspec/core/cache.h"
#include "kvspec/kernels/kv_view.h"
#include "kvspec/kernels/mask.h"

namespace kvspec {

// Builds the mask of the forward `cols` that was just appended to a cache
// whose rows now have next positions `next` (so the forward's real tokens
// of row r are next[r] - Real(r) .. next[r] - 1), over the cache's slot
// positions.
Mask BuildMask(const ForwardColumns& cols, const std::vector<int32_t>& next,
               int32_t window, const int32_t* slot_pos, size_t slot_stride,
               int32_t slots, int32_t first_slot = 0);

// The same, built into *mask: allocates nothing when ReserveMask reserved
// it for these columns (a layout reserves its masks before it writes).
void BuildMaskInto(Mask* mask, const ForwardColumns& cols, const std::vector<int32_t>& next,
                   int32_t window, const int32_t* slot_pos, size_t slot_stride, int32_t slots,
                   int32_t first_slot);
void ReserveMask(Mask* mask, const ForwardColumns& cols, size_t rows);

// The mask of that forward over a cache's view.
Mask BuildMask(const ForwardColumns& cols, const std::vector<int32_t>& next,
               int32_t window, const KvView& view);

}  // namespace kvspec
