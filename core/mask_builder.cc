#include "kvspec/core/mask_builder.h"

#include <algorithm>

#include "kvspec/core/kv_cache.h"

namespace kvspec {

Mask BuildMask(const ForwardColumns& cols, const std::vector<int32_t>& next,
               int32_t window, const int32_t* slot_pos, size_t slot_stride,
               int32_t slots, int32_t first_slot) {
  Mask m;
  BuildMaskInto(&m, cols, next, window, slot_pos, slot_stride, slots, first_slot);
  return m;
}

void ReserveMask(Mask* m, const ForwardColumns& cols, size_t rows) {
  const size_t n = rows * static_cast<size_t>(cols.columns);
  m->query_pos.reserve(n);
  m->lo.reserve(n);
  m->hi.reserve(n);
}

void BuildMaskInto(Mask* mask, const ForwardColumns& cols, const std::vector<int32_t>& next,
                   int32_t window, const int32_t* slot_pos, size_t slot_stride, int32_t slots,
                   int32_t first_slot) {
  Mask& m = *mask;
  m.first_slot = first_slot;
  m.window = window;
  m.rows = static_cast<int>(next.size());
  m.queries = cols.columns;
  m.slot_pos = slot_pos;
  m.slot_stride = slot_stride;
  m.slots = slots;
  const size_t n = static_cast<size_t>(m.rows) * m.queries;
  m.query_pos.assign(n, -1);
  m.lo.assign(n, 1);  // lo > hi: sees nothing
  m.hi.assign(n, 0);
  for (int r = 0; r < m.rows; ++r) {
    const int32_t first = next[r] - cols.Real(r);
    for (int32_t i = cols.left[r]; i < cols.columns - cols.right[r]; ++i) {
      const size_t rq = static_cast<size_t>(r) * m.queries + i;
      const int32_t p = first + (i - cols.left[r]);
      m.query_pos[rq] = p;
      m.hi[rq] = p;
      m.lo[rq] = window == kNoWindow ? 0 : std::max(0, p - window + 1);
    }
  }
}

Mask BuildMask(const ForwardColumns& cols, const std::vector<int32_t>& next,
               int32_t window, const KvView& view) {
  return BuildMask(cols, next, window, view.slot_pos, view.slot_stride, view.slots,
                   view.first_slot);
}

}  // namespace kvspec
