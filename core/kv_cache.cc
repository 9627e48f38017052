#include "kvspec/core/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>

#include "kvspec/core/invariants.h"
#include "kvspec/core/invariants_internal.h"
#include "kvspec/kernels/quantize.h"

namespace kvspec {

Status CheckForwardColumns(const ForwardColumns& cols, const std::vector<int32_t>& next,
                           int64_t columns) {
  const size_t rows = next.size();
  if (cols.columns < 1) {
    return Status::Error("a forward needs at least one column, got " +
                         std::to_string(cols.columns));
  }
  // Positions and column counts are int32 everywhere (masks, slot positions,
  // the format): a forward that would take them past 2^31-1 is refused.
  if (columns + cols.columns > kMaxPosition) {
    return Status::Error("a forward of " + std::to_string(cols.columns) + " columns after " +
                         std::to_string(columns) + " would pass the largest position " +
                         std::to_string(kMaxPosition));
  }
  if (cols.left.size() != rows || cols.right.size() != rows) {
    return Status::Error("padding lists have " + std::to_string(cols.left.size()) +
                         " and " + std::to_string(cols.right.size()) +
                         " values for " + std::to_string(rows) + " rows");
  }
  for (size_t r = 0; r < rows; ++r) {
    if (cols.left[r] < 0 || cols.right[r] < 0 ||
        static_cast<int64_t>(cols.left[r]) + cols.right[r] > cols.columns) {
      return Status::Error("row " + std::to_string(r) + ": left " +
                           std::to_string(cols.left[r]) + " + right " +
                           std::to_string(cols.right[r]) + " exceeds " +
                           std::to_string(cols.columns) + " columns");
    }
    if (static_cast<int64_t>(next[r]) + cols.Real(r) > kMaxPosition) {
      return Status::Error("row " + std::to_string(r) + " at position " +
                           std::to_string(next[r]) + " would pass the largest position " +
                           std::to_string(kMaxPosition));
    }
    if (cols.left[r] > 0 && next[r] > 0) {
      return Status::Error("row " + std::to_string(r) + " holds " +
                           std::to_string(next[r]) +
                           " tokens: left padding is only allowed on an empty row");
    }
  }
  return Status::Ok();
}

ColumnStore::ColumnStore(int rows, int kv_heads, int dim, int32_t window,
                         int32_t ring_capacity, KvType type)
    : rows_(rows), kv_heads_(kv_heads), dim_(dim), type_(type),
      row_bytes_(KvRowBytes(type, dim)), window_(window),
      ring_capacity_(ring_capacity), next_(static_cast<size_t>(rows), 0),
      held_pads_(static_cast<size_t>(rows), 0) {}

void ColumnStore::CountHeldPads() {
  for (int r = 0; r < rows_; ++r) {
    held_pads_[r] = 0;
    for (int64_t c = 0; c < held_; ++c) held_pads_[r] += slot_pos_[r * slots_ + Slot(c)] < 0;
  }
}

size_t ColumnStore::bytesPerToken() const {
  return static_cast<size_t>(kv_heads_) * 2 * row_bytes_;
}

size_t ColumnStore::allocatedBytes() const {
  return k_.size() + v_.size() + slot_pos_.size() * sizeof(int32_t);
}

bool ColumnStore::isTrimmable() const { return !wrapped(); }

int64_t ColumnStore::ColumnsToKeep() const {
  if (!wrapped()) return held_;
  // Per row: every real token while the row holds at most M of them (so an
  // extracted row is the single-row ring it would have been: trimmable),
  // else its last W - 1 (what the next query needs), however many pad
  // columns (prepared prefill padding, turned-down tips) sit between them.
  auto need = [&](int r) -> int64_t {
    return next_[r] <= ring_capacity_ ? next_[r] : window_ - 1;
  };
  int64_t keep = 0;
  bool holes = false;
  for (int r = 0; r < rows_; ++r) {
    holes = holes || held_pads_[r] > 0;
    keep = std::max(keep, need(r));
  }
  if (!holes) return std::min<int64_t>(held_, keep);
  keep = 0;
  for (int r = 0; r < rows_ && keep < held_; ++r) {
    const int32_t* pos = slot_pos_.data() + r * slots_;
    int64_t found = 0;
    int64_t c = held_ - 1;
    for (; c >= 0 && found < need(r); --c) found += pos[Slot(c)] >= 0 ? 1 : 0;
    keep = std::max(keep, held_ - 1 - c);
  }
  return keep;
}

size_t ColumnStore::SlotsAfterAppend(int32_t columns) const {
  const size_t needed = static_cast<size_t>(ColumnsToKeep()) + static_cast<size_t>(columns);
  if (ring_capacity_ == 0) {
    return needed <= slots_ ? slots_ : std::max<size_t>({needed, slots_ + slots_ / 2, 16});
  }
  return std::max<size_t>({slots_, needed, static_cast<size_t>(ring_capacity_)});
}

size_t ColumnStore::BytesAfterAppend(int32_t columns) const {
  return static_cast<size_t>(rows_) * SlotsAfterAppend(columns) *
         (bytesPerToken() + sizeof(int32_t));
}

void ColumnStore::CopyColumn(int row, size_t from_slot, size_t to_slot) {
  const size_t rb = row_bytes_;
  for (int h = 0; h < kv_heads_; ++h) {
    const size_t base = (static_cast<size_t>(row) * kv_heads_ + h) * slots_ * rb;
    std::memcpy(&k_[base + to_slot * rb], &k_[base + from_slot * rb], rb);
    std::memcpy(&v_[base + to_slot * rb], &v_[base + from_slot * rb], rb);
  }
  slot_pos_[row * slots_ + to_slot] = slot_pos_[row * slots_ + from_slot];
}

void ColumnStore::ReserveAppend(const ForwardColumns& cols, AppendSpace* space) const {
  space->slots = SlotsAfterAppend(cols.columns);
  space->relayout = space->slots != slots_;
  if (space->relayout) {
    const size_t bytes = static_cast<size_t>(rows_) * kv_heads_ * space->slots * row_bytes_;
    space->k.assign(bytes, 0);
    space->v.assign(bytes, 0);
    space->pos.assign(static_cast<size_t>(rows_) * space->slots, -1);
  }
  space->last_write.assign(static_cast<size_t>(rows_), 0);
}

void ColumnStore::Relayout(AppendSpace* space, int64_t keep) {
  const size_t rb = row_bytes_;
  const size_t slots = space->slots;
  AlignedVector<uint8_t>& k = space->k;
  AlignedVector<uint8_t>& v = space->v;
  std::vector<int32_t>& pos = space->pos;
  for (int r = 0; r < rows_; ++r) {
    for (int64_t c = 0; c < keep; ++c) {
      const size_t from = Slot(held_ - keep + c);
      for (int h = 0; h < kv_heads_; ++h) {
        const size_t old_base = (static_cast<size_t>(r) * kv_heads_ + h) * slots_ * rb;
        const size_t new_base = (static_cast<size_t>(r) * kv_heads_ + h) * slots * rb;
        std::memcpy(&k[new_base + c * rb], &k_[old_base + from * rb], rb);
        std::memcpy(&v[new_base + c * rb], &v_[old_base + from * rb], rb);
      }
      pos[r * slots + c] = slot_pos_[r * slots_ + from];
    }
  }
  k_.swap(k);
  v_.swap(v);
  slot_pos_.swap(pos);
  slots_ = slots;
  first_ = 0;
  held_ = keep;
  CountHeldPads();
}

Status ColumnStore::CheckAppend(const ForwardColumns& cols) const {
  // The one refusal StoreKvRow could make, made before anything changes.
  KVSPEC_RETURN_IF_ERROR(CheckKvType(type_, dim_));
  return CheckForwardColumns(cols, next_, columns_);
}

Status ColumnStore::AppendReserved(const ForwardColumns& cols, const float* k, const float* v,
                                   AppendSpace* space) {
  KVSPEC_RETURN_IF_ERROR(CheckAppend(cols));
  if (space->slots != SlotsAfterAppend(cols.columns) ||
      space->last_write.size() != static_cast<size_t>(rows_)) {
    return Status::Error("internal: append space reserved for other columns");
  }
  if (space->relayout) Relayout(space, ColumnsToKeep());
  // In place: overwriting the oldest held columns never reaches the `keep`
  // newest ones, because keep + L <= S.
  const size_t dim = static_cast<size_t>(dim_);
  const size_t rb = row_bytes_;
  const size_t L = static_cast<size_t>(cols.columns);
  for (size_t i = 0; i < L; ++i) {
    size_t slot;
    const bool overwrite = held_ == static_cast<int64_t>(slots_);
    if (!overwrite) {
      slot = Slot(held_);
      ++held_;
    } else {
      slot = first_;
      first_ = (first_ + 1) % slots_;
    }
    for (int r = 0; r < rows_; ++r) {
      if (overwrite) held_pads_[r] -= slot_pos_[r * slots_ + slot] < 0;
      for (int h = 0; h < kv_heads_; ++h) {
        // Input [rows][L][kv_heads][dim] -> storage [rows][kv_heads][S] rows
        // of the storage type (the dim was checked at construction).
        const size_t in = ((r * L + i) * kv_heads_ + h) * dim;
        const size_t out = ((static_cast<size_t>(r) * kv_heads_ + h) * slots_ + slot) * rb;
        KVSPEC_RETURN_IF_ERROR(StoreKvRow(type_, k + in, dim_, &k_[out]));
        KVSPEC_RETURN_IF_ERROR(StoreKvRow(type_, v + in, dim_, &v_[out]));
      }
      const int32_t col = static_cast<int32_t>(i);
      const bool real = col >= cols.left[r] && col < cols.columns - cols.right[r];
      slot_pos_[r * slots_ + slot] = real ? next_[r] + (col - cols.left[r]) : -1;
      held_pads_[r] += !real;
    }
  }
  last_write_real_.swap(space->last_write);
  for (int r = 0; r < rows_; ++r) {
    next_[r] += cols.Real(r);
    last_write_real_[r] = cols.Real(r);
  }
  last_write_was_decode_ = cols.decode;
  columns_ += cols.columns;
  peak_before_write_ = peak_;
  peak_ = std::max(peak_, columns_);
  KVSPEC_ASSERT_INVARIANTS(*this, "ColumnStore::Append");
  return Status::Ok();
}

void ColumnStore::Drop(const std::vector<int32_t>& drop) {
  const int32_t common = *std::min_element(drop.begin(), drop.end());
  std::vector<char> keep(static_cast<size_t>(held_));
  for (int r = 0; r < rows_; ++r) {
    int32_t* pos = slot_pos_.data() + r * slots_;  // may be empty: no [] on it
    // The last `common` real columns go; the rest shift down in logical order.
    int32_t removed = 0;
    for (int64_t c = held_ - 1; c >= 0; --c) {
      keep[c] = !(pos[Slot(c)] >= 0 && removed < common);
      if (!keep[c]) ++removed;
    }
    int64_t to = 0;
    for (int64_t c = 0; c < held_; ++c) {
      if (!keep[c]) continue;
      if (to != c) CopyColumn(r, Slot(c), Slot(to));
      ++to;
    }
    for (int64_t c = to; c < held_; ++c) pos[Slot(c)] = -1;
    // Rows that drop more than the common count turn their remaining
    // rejected tips into padding: they hold no visible token any more.
    int32_t extra = drop[r] - common;
    for (int64_t c = to - 1; c >= 0 && extra > 0; --c) {
      if (pos[Slot(c)] >= 0) {
        pos[Slot(c)] = -1;
        --extra;
      }
    }
    next_[r] -= drop[r];
  }
  held_ -= common;
  columns_ -= common;
  CountHeldPads();
  // Dropping the tips of the last write leaves the ring as if only the
  // accepted tokens had been written: wrap state included.
  if (!last_write_real_.empty()) peak_ = std::max(peak_before_write_, columns_);
  last_write_real_.clear();
  last_write_was_decode_ = false;
  KVSPEC_ASSERT_INVARIANTS(*this, "ColumnStore::Drop (trim, drop tips)");
}

Status ColumnStore::CheckTrim(int32_t n, bool bypass) const {
  if (n < 0) return Status::Error("trim of a negative count");
  if (bypass) {
    if (last_write_real_.empty() || last_write_was_decode_) {
      return Status::Error("trim bypass is only valid right after a window write");
    }
    for (int r = 0; r < rows_; ++r) {
      if (last_write_real_[r] < n) {
        return Status::Error("trim bypass of " + std::to_string(n) + ": row " +
                             std::to_string(r) + " wrote only " +
                             std::to_string(last_write_real_[r]) +
                             " real tokens in the last window");
      }
    }
  } else if (!isTrimmable()) {
    return Status::Error("the ring has wrapped (" + std::to_string(peak_) +
                         " columns ever held, capacity " + std::to_string(ring_capacity_) +
                         "): it is not trimmable");
  }
  for (int r = 0; r < rows_; ++r) {
    if (next_[r] < n) {
      return Status::Error("trim " + std::to_string(n) + ": row " + std::to_string(r) +
                           " holds only " + std::to_string(next_[r]) + " tokens");
    }
  }
  return Status::Ok();
}

Status ColumnStore::trim(int32_t n, bool bypass) {
  KVSPEC_RETURN_IF_ERROR(CheckTrim(n, bypass));
  Drop(std::vector<int32_t>(static_cast<size_t>(rows_), n));
  return Status::Ok();
}

Status ColumnStore::CheckDropTips(const std::vector<int32_t>& drop) const {
  if (drop.size() != static_cast<size_t>(rows_)) {
    return Status::Error("drop list has " + std::to_string(drop.size()) +
                         " values for " + std::to_string(rows_) + " rows");
  }
  if (last_write_real_.empty()) {
    return Status::Error("rejected tips can only be dropped right after a write");
  }
  for (int r = 0; r < rows_; ++r) {
    if (drop[r] < 0 || drop[r] > last_write_real_[r]) {
      return Status::Error("row " + std::to_string(r) + ": cannot drop " +
                           std::to_string(drop[r]) + " of the " +
                           std::to_string(last_write_real_[r]) +
                           " tokens of the last write");
    }
  }
  return Status::Ok();
}

Status ColumnStore::DropTips(const std::vector<int32_t>& drop) {
  KVSPEC_RETURN_IF_ERROR(CheckDropTips(drop));
  Drop(drop);
  return Status::Ok();
}

void ColumnStore::HashState(Hasher* hasher) const {
  hasher->Value(rows_);
  hasher->Value(kv_heads_);
  hasher->Value(dim_);
  hasher->Value(type_);
  hasher->Value(window_);
  hasher->Value(ring_capacity_);
  hasher->Value(columns_);
  hasher->Value(peak_);
  hasher->Value(peak_before_write_);
  hasher->Value(static_cast<uint64_t>(slots_));
  hasher->Value(static_cast<uint64_t>(first_));
  hasher->Value(held_);
  hasher->Vector(k_);
  hasher->Vector(v_);
  hasher->Vector(slot_pos_);
  hasher->Vector(next_);
  hasher->Vector(held_pads_);
  hasher->Vector(last_write_real_);
  hasher->Value(last_write_was_decode_);
}

KvView ColumnStore::View() const {
  return KvView::DenseBytes(type_, k_.data(), v_.data(), slot_pos_.data(), rows_, kv_heads_,
                            dim_, static_cast<int32_t>(slots_), static_cast<int32_t>(first_));
}

std::vector<int32_t> ColumnStore::LogicalSlots(int row) const {
  std::vector<int32_t> slots;
  for (int64_t c = 0; c < held_; ++c) {
    const size_t s = Slot(c);
    if (slot_pos_[row * slots_ + s] >= 0) slots.push_back(static_cast<int32_t>(s));
  }
  return slots;
}

bool ColumnStore::SameShape(const ColumnStore& o) const {
  return kv_heads_ == o.kv_heads_ && dim_ == o.dim_ && type_ == o.type_ &&
         window_ == o.window_ && ring_capacity_ == o.ring_capacity_;
}

bool ColumnStore::SamePhase(const ColumnStore& o) const {
  return slots_ == o.slots_ && first_ == o.first_ && held_ == o.held_ &&
         slot_pos_ == o.slot_pos_ && peak_ == o.peak_ && last_write_real_ == o.last_write_real_;
}

int64_t ColumnStore::GatheredSlots(const std::vector<RowSource>& sources, int64_t columns) {
  // Right-justified: a plain cache holds every column, pads included.
  if (sources.empty() || sources[0].store->ring_capacity_ == 0) return columns;
  int64_t held = 0;
  for (const RowSource& src : sources) held = std::max(held, src.store->held_);
  return held;
}

size_t ColumnStore::StorageBytes(int rows, int kv_heads, int dim, KvType type,
                                 int64_t slots) {
  const size_t cells = static_cast<size_t>(rows) * static_cast<size_t>(slots);
  return cells * (2 * static_cast<size_t>(kv_heads) * KvRowBytes(type, dim) + sizeof(int32_t));
}

int64_t ColumnStore::HeldTokens(int row) const {
  int64_t real = 0;
  for (int64_t c = 0; c < held_; ++c) real += slot_pos_[row * slots_ + Slot(c)] >= 0;
  return real;
}

void ColumnStore::GatherRows(const std::vector<RowSource>& sources, int64_t columns,
                             int64_t peak) {
  // Sized from what the rows hold, never from the ring capacity: a ring
  // grows to M at its next append (SlotsAfterAppend).
  const int64_t held = GatheredSlots(sources, columns);
  const size_t slots = static_cast<size_t>(held);
  const size_t rb = row_bytes_;
  k_.assign(static_cast<size_t>(rows_) * kv_heads_ * slots * rb, 0);
  v_.assign(k_.size(), 0);
  slot_pos_.assign(static_cast<size_t>(rows_) * slots, -1);
  slots_ = slots;
  first_ = 0;
  held_ = held;
  for (int r = 0; r < rows_; ++r) {
    const ColumnStore& src = *sources[r].store;
    const int sr = sources[r].row;
    for (int64_t c = 0; c < held; ++c) {
      const int64_t from = src.held_ - (held - c);  // same distance from the newest column
      if (from < 0) continue;                      // left padding in front
      const size_t fs = src.Slot(from);
      for (int h = 0; h < kv_heads_; ++h) {
        const size_t in = ((static_cast<size_t>(sr) * kv_heads_ + h) * src.slots_ + fs) * rb;
        const size_t out = ((static_cast<size_t>(r) * kv_heads_ + h) * slots + c) * rb;
        std::memcpy(&k_[out], &src.k_[in], rb);
        std::memcpy(&v_[out], &src.v_[in], rb);
      }
      slot_pos_[r * slots + c] = src.slot_pos_[sr * src.slots_ + fs];
    }
    next_[r] = src.next_[sr];
  }
  columns_ = columns;
  peak_ = std::max(peak, columns);
  peak_before_write_ = peak_;
  last_write_real_.clear();
  last_write_was_decode_ = false;
  CountHeldPads();
  KVSPEC_ASSERT_INVARIANTS(*this, "ColumnStore::GatherRows");
}

void ColumnStore::GatherRealTokens(const ColumnStore& src, int row) {
  const int64_t count = src.next_[row];
  // Only the real tokens the row holds (no pad columns, not M slots).
  const int64_t held = src.HeldTokens(row);
  const size_t slots = static_cast<size_t>(held);
  const size_t rb = row_bytes_;
  k_.assign(static_cast<size_t>(kv_heads_) * slots * rb, 0);
  v_.assign(k_.size(), 0);
  slot_pos_.assign(slots, -1);
  slots_ = slots;
  first_ = 0;
  held_ = held;
  const int32_t* src_pos = src.slot_pos_.data() + static_cast<size_t>(row) * src.slots_;
  int64_t c = 0;
  for (int64_t from = 0; from < src.held_; ++from) {
    const size_t fs = src.Slot(from);
    if (src_pos[fs] < 0) continue;
    for (int h = 0; h < kv_heads_; ++h) {
      const size_t in = ((static_cast<size_t>(row) * kv_heads_ + h) * src.slots_ + fs) * rb;
      const size_t out = (static_cast<size_t>(h) * slots + c) * rb;
      std::memcpy(&k_[out], &src.k_[in], rb);
      std::memcpy(&v_[out], &src.v_[in], rb);
    }
    slot_pos_[c] = src_pos[fs];
    ++c;
  }
  next_[0] = static_cast<int32_t>(count);
  columns_ = held;
  peak_ = held;
  if (held < count) {
    // Older tokens are gone: the row can only behave as a wrapped ring.
    columns_ = count;
    peak_ = std::max<int64_t>(count, ring_capacity_ + 1);
  }
  peak_before_write_ = peak_;
  last_write_real_.clear();
  last_write_was_decode_ = false;
  CountHeldPads();
  KVSPEC_ASSERT_INVARIANTS(*this, "ColumnStore::GatherRealTokens");
}

std::unique_ptr<ColumnStore> NewColumnStore(bool batched, int rows, int kv_heads, int dim,
                                            int32_t window, int32_t ring_capacity, KvType type) {
  if (ring_capacity > 0) {
    if (!batched) {
      return std::make_unique<RotatingCache>(kv_heads, dim, window, ring_capacity, type);
    }
    return std::make_unique<BatchedRotatingCache>(rows, kv_heads, dim, window, ring_capacity,
                                                  type);
  }
  if (!batched) return std::make_unique<KvCache>(kv_heads, dim, window, type);
  return std::make_unique<BatchedKvCache>(rows, kv_heads, dim, window, type);
}

// ------------------------------------------------------------ invariants
// The wording the checks share (core/invariants_internal.h).
using invariants::Broken;
using invariants::ProductOrMax;
using invariants::RowText;
using invariants::SizeIs;

Status ColumnStore::CheckStoredState() const {
  constexpr const char* kType = "ColumnStore";
  const bool ring = ring_capacity_ > 0;
  if (rows_ < 1 || kv_heads_ < 1 || dim_ < 1 || window_ < 0 || ring_capacity_ < 0 ||
      (ring && (window_ < 1 || window_ > ring_capacity_)) || !CheckKvType(type_, dim_).ok() ||
      row_bytes_ != KvRowBytes(type_, dim_)) {
    return Broken(kType, 1,
                  "bad shape (rows " + std::to_string(rows_) + ", kv heads " +
                      std::to_string(kv_heads_) + ", dim " + std::to_string(dim_) + ", type " +
                      KvTypeName(type_) + ", window " + std::to_string(window_) +
                      ", ring capacity " + std::to_string(ring_capacity_) + ")");
  }
  if (held_ < 0 || held_ > columns_ || columns_ > peak_ || peak_before_write_ < 0 ||
      peak_before_write_ > peak_) {
    return Broken(kType, 2,
                  "counters out of order (held " + std::to_string(held_) + ", columns " +
                      std::to_string(columns_) + ", peak " + std::to_string(peak_) +
                      ", peak before the last write " + std::to_string(peak_before_write_) +
                      ")");
  }
  if (static_cast<uint64_t>(held_) > slots_ || (slots_ == 0 ? first_ != 0 : first_ >= slots_)) {
    return Broken(kType, 3,
                  "inconsistent ring geometry (slots " + std::to_string(slots_) + ", first " +
                      std::to_string(first_) + ", held " + std::to_string(held_) + ")");
  }
  if (!ring && (held_ != columns_ || first_ != 0)) {
    return Broken(kType, 4, "a plain cache holds every column from slot 0");
  }
  if (!wrapped() && held_ != columns_) {
    return Broken(kType, 4, "a cache that has not wrapped holds every column");
  }
  const size_t rows = static_cast<size_t>(rows_);
  const size_t elements = ProductOrMax({rows, static_cast<size_t>(kv_heads_), slots_, row_bytes_});
  KVSPEC_RETURN_IF_ERROR(SizeIs(kType, 5, "keys", k_.size(), elements));
  KVSPEC_RETURN_IF_ERROR(SizeIs(kType, 5, "values", v_.size(), elements));
  KVSPEC_RETURN_IF_ERROR(
      SizeIs(kType, 5, "slot positions", slot_pos_.size(), ProductOrMax({rows, slots_})));
  KVSPEC_RETURN_IF_ERROR(SizeIs(kType, 5, "next positions", next_.size(), rows));
  if (!last_write_real_.empty() && last_write_real_.size() != rows) {
    return Broken(kType, 5,
                  "last write lists " + std::to_string(last_write_real_.size()) + " rows");
  }
  if (last_write_real_.empty() && last_write_was_decode_) {
    return Broken(kType, 9, "the last write is a decode, but there is no last write");
  }
  for (int row = 0; row < rows_; ++row) KVSPEC_RETURN_IF_ERROR(CheckRow(row));
  return Status::Ok();
}

Status ColumnStore::CheckRow(int row) const {
  constexpr const char* kType = "ColumnStore";
  const int32_t next = next_[row];
  if (next < 0 || next > columns_) {
    return Broken(kType, 6,
                  RowText(row) + ": next position " + std::to_string(next) + " outside [0, " +
                      std::to_string(columns_) + "]");
  }
  const int32_t* pos = slot_pos_.data() + static_cast<size_t>(row) * slots_;
  int32_t prev = -1, real = 0;
  for (int64_t col = 0; col < held_; ++col) {
    const int32_t p = pos[Slot(col)];
    if (p < -1 || p >= next || (p >= 0 && p <= prev)) {
      return Broken(kType, 7,
                    RowText(row) + ": slot position " + std::to_string(p) +
                        " out of order or range");
    }
    if (p >= 0) {
      prev = p;
      ++real;
    }
  }
  // The slots after the newest held column, up to the oldest, hold nothing.
  for (int64_t col = held_; col < static_cast<int64_t>(slots_); ++col) {
    if (pos[Slot(col)] != -1) {
      return Broken(kType, 7, RowText(row) + ": a slot outside the held columns holds a position");
    }
  }
  const int32_t needed =
      wrapped() && next > ring_capacity_ ? std::min(next, window_ - 1) : next;
  if (real < needed || (real > 0 && prev != next - 1)) {
    return Broken(kType, 8,
                  RowText(row) + " holds " + std::to_string(real) +
                      " of the tokens it needs");
  }
  if (!last_write_real_.empty() && (last_write_real_[row] < 0 || last_write_real_[row] > real)) {
    return Broken(kType, 9, RowText(row) + ": last write larger than what is held");
  }
  return Status::Ok();
}

Status ColumnStore::CheckInvariants() const {
  constexpr const char* kType = "ColumnStore";
  KVSPEC_RETURN_IF_ERROR(CheckStoredState());
  KVSPEC_RETURN_IF_ERROR(
      SizeIs(kType, 10, "held pads", held_pads_.size(), static_cast<size_t>(rows_)));
  for (int row = 0; row < rows_; ++row) {
    int64_t pads = 0;
    for (int64_t col = 0; col < held_; ++col) {
      pads += slot_pos_[static_cast<size_t>(row) * slots_ + Slot(col)] < 0;
    }
    if (pads != held_pads_[row]) {
      return Broken(kType, 10,
                    RowText(row) + " counts " + std::to_string(held_pads_[row]) +
                        " held pads, holds " + std::to_string(pads));
    }
  }
  return Status::Ok();
}

}  // namespace kvspec
