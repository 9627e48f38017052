// The mask the attention kernel tests share: queries at the positions after
// the held ones (some a little earlier, so their ranges differ), every
// pad_every-th query a pad that admits nothing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kvspec/kernels/mask.h"
#include "kvspec/kernels/test_random.h"

namespace kvspec::kernel_test {

// A mask over `slots` slots per row (slot positions at slot_pos), `rows` x
// `queries` queries, sliding window `window` (0: none).
inline void FillTestMask(int32_t window, int rows, int32_t queries, int32_t slots,
                         int32_t first_slot, int pad_every, const int32_t* slot_pos, Rand* r,
                         Mask* m) {
  m->window = window;
  m->rows = rows;
  m->queries = queries;
  m->slot_pos = slot_pos;
  m->slot_stride = static_cast<size_t>(slots);
  m->slots = slots;
  m->first_slot = first_slot;
  const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(queries);
  m->query_pos.resize(n);
  m->lo.resize(n);
  m->hi.resize(n);
  for (size_t rq = 0; rq < n; ++rq) {
    const int32_t qi = static_cast<int32_t>(rq % static_cast<size_t>(queries));
    const bool pad = pad_every > 0 && qi % pad_every == pad_every - 1;
    const int32_t qp = slots + 3 - queries + qi - static_cast<int32_t>(r->Int(0, 2));
    m->query_pos[rq] = pad ? -1 : qp;
    // lo >= 0: an empty slot (position -1) is never admitted.
    m->lo[rq] = pad ? 0 : (window > 0 ? std::max(0, qp - window + 1) : 0);
    m->hi[rq] = pad ? -1 : qp;
  }
}

}  // namespace kvspec::kernel_test
