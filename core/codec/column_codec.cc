// Codec of the column caches (kv, rotating and their batched kinds).
#include <limits>
#include <memory>
#include <utility>

#include "kvspec/core/codec/cache_codec.h"

namespace kvspec {

using namespace codec_internal;  // NOLINT: the format's bounds and byte I/O

void CacheCodec::EncodeColumns(const ColumnStore& c, Writer& w) {
  w.Value<int32_t>(c.rows_);
  w.Value<int32_t>(c.kv_heads_);
  w.Value<int32_t>(c.dim_);
  w.Value<int32_t>(c.window_);
  w.Value<int32_t>(c.ring_capacity_);
  w.Value<uint8_t>(static_cast<uint8_t>(c.type_));
  w.Value<int64_t>(c.columns_);
  w.Value<int64_t>(c.peak_);
  w.Value<int64_t>(c.peak_before_write_);
  w.Value<uint64_t>(c.slots_);
  w.Value<uint64_t>(c.first_);
  w.Value<int64_t>(c.held_);
  w.Vector(c.k_);
  w.Vector(c.v_);
  w.Vector(c.slot_pos_);
  w.Vector(c.next_);
  w.Vector(c.last_write_real_);
  w.Value<uint8_t>(c.last_write_was_decode_ ? 1 : 0);
}

Status CacheCodec::DecodeColumns(Reader& r, bool batched, bool ring,
                                 std::unique_ptr<Cache>* out) {
  int32_t rows = 0, heads = 0, dim = 0, window = 0, capacity = 0;
  r.Int(&rows, 1, batched ? kMaxRowsRead : 1, "rows");
  r.Int(&heads, 1, kMaxHeadsRead, "kv heads");
  r.Int(&dim, 1, kMaxDimRead, "head dim");
  r.Int(&window, 0, kMaxWindowRead, "window");
  // The kind says which: a ring has a capacity, a plain cache none.
  r.Int(&capacity, ring ? 1 : 0, ring ? kMaxWindowRead : 0, "ring capacity");
  uint8_t type = 0;  // version 1: fp32 only
  if (r.version() >= 2) r.Int(&type, 0, static_cast<int64_t>(KvType::kQ4_0), "storage type");
  // The store allocates its per-row vectors (next positions and held pads,
  // 12 bytes per row) before they are read; a valid encoding holds the next
  // positions, one int32 per row, after the fixed fields. Not the last
  // write's counts: they are empty before the first write and after a trim
  // (counting them refused a fresh 23-row layout's own encoding).
  r.Holds(rows, sizeof(int32_t), "per-row positions");
  if (!r.ok()) return r.status();
  std::unique_ptr<ColumnStore> c =
      NewColumnStore(batched, rows, heads, dim, window, capacity, static_cast<KvType>(type));
  uint64_t slots = 0, first = 0;
  r.Int(&c->columns_, 0, std::numeric_limits<int32_t>::max(), "columns");
  r.Int(&c->peak_, 0, std::numeric_limits<int32_t>::max(), "peak");
  r.Value(&c->peak_before_write_);
  r.Int(&slots, 0, kMaxWindowRead, "slots");
  r.Value(&first);
  r.Value(&c->held_);
  c->slots_ = static_cast<size_t>(slots);
  c->first_ = static_cast<size_t>(first);
  // Vectors are read as encoded (their counts bounded by the input); their
  // sizes are invariants of the cache.
  // The stored rows' bytes (version 1 counted them in floats).
  const size_t unit = r.version() >= 2 ? 1 : sizeof(float);
  r.Bytes(&c->k_, unit, "keys");
  r.Bytes(&c->v_, unit, "values");
  r.Vector(&c->slot_pos_, -1, "slot positions");
  r.Vector(&c->next_, -1, "next positions");
  r.Vector(&c->last_write_real_, -1, "last write");
  r.Bool(&c->last_write_was_decode_);
  if (!r.ok()) return r.status();
  // The held pads are not encoded: they follow from the slot positions,
  // counted once the stored state holds its invariants.
  if (c->CheckStoredState().ok()) c->CountHeldPads();
  const Status s = c->CheckInvariants();
  if (!s.ok()) return r.Fail(s.message()), r.status();
  *out = std::move(c);
  return Status::Ok();
}

}  // namespace kvspec
