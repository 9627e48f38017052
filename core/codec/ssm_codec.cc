// Codec of the recurrent caches (ssm, batched_ssm).
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>

#include "kvspec/core/codec/cache_codec.h"
#include "kvspec/kernels/conv1d.h"

namespace kvspec {

using namespace codec_internal;  // NOLINT: the format's bounds and byte I/O

void CacheCodec::EncodeSsm(const SsmCacheBase& c, Writer& w) {
  w.Value<int32_t>(c.rows_);
  w.Value<int32_t>(c.shape_.value_heads);
  w.Value<int32_t>(c.shape_.key_heads);
  w.Value<int32_t>(c.shape_.dk);
  w.Value<int32_t>(c.shape_.dv);
  w.Value<int32_t>(c.shape_.conv);
  w.Value<uint8_t>(c.shape_.gate_per_lane ? 1 : 0);
  w.Value<int64_t>(c.columns_);
  // The states in trace order, as one vector: its count, then each buffer
  // converted through a buffer-sized scratch.
  w.Value<uint64_t>(c.state_.size());
  std::vector<float> buffer(c.row_floats_);
  for (size_t b = 0; b < static_cast<size_t>(c.rows_) * 2; ++b) {
    c.BufferTraceOrder(b, buffer.data());
    w.Raw(buffer.data(), buffer.size() * sizeof(float));
  }
  w.Vector(c.active_);
  w.Vector(c.next_);
  w.Value<uint8_t>(c.armed_ ? 1 : 0);
  w.Value<uint8_t>(c.verified_ ? 1 : 0);
  w.Vector(c.snapshot_);
  w.Vector(c.round_real_);
  for (const auto& rec : c.record_) w.Vector(rec);
}

Status CacheCodec::DecodeSsm(Reader& r, bool batched, std::unique_ptr<Cache>* out) {
  int32_t rows = 0;
  SsmShape s;
  r.Int(&rows, 1, batched ? kMaxRowsRead : 1, "rows");
  r.Int(&s.value_heads, 1, kMaxHeadsRead, "value heads");
  r.Int(&s.key_heads, 1, kMaxHeadsRead, "key heads");
  r.Int(&s.dk, 1, kMaxDimRead, "dk");
  r.Int(&s.dv, 1, kMaxDimRead, "dv");
  r.Int(&s.conv, 1, static_cast<int64_t>(kMaxConvKernel), "conv kernel");
  r.Bool(&s.gate_per_lane);
  if (!r.ok()) return r.status();
  // Refused by CheckInvariants() anyway; checked first because it bounds the
  // cache's scratch (below) by its state.
  if (s.value_heads % s.key_heads != 0) {
    return r.Fail("value heads not a multiple of key heads"), r.status();
  }
  const int64_t row_floats =
      Product({s.conv - 1, 2 * s.key_heads, s.dk}) + Product({s.conv - 1, s.value_heads, s.dv}) +
      Product({s.value_heads, s.dv, s.dk});
  const int64_t state_floats = Product({rows, 2, row_floats});
  // The cache allocates its states (and one row's scratch, at most three
  // times the recurrent state since key heads divide value heads, and the
  // packed conv weights, K*C floats: at most a row's two conv states for
  // K >= 2, C for K = 1) and its per-row positions before they are read:
  // the floats and positions that follow must be in the input.
  // Within the read bounds neither product can overflow (cache_codec.h), so
  // neither is Product's -1, and every row holds at least one recurrent
  // float per buffer: input holding the states (8 bytes or more per row)
  // also holds the 5 bytes per row of positions and buffer indexes the
  // cache allocates before it reads them.
  if (state_floats > static_cast<int64_t>(r.left() / sizeof(float))) {
    return r.Fail("recurrent state larger than the input"), r.status();
  }
  std::unique_ptr<SsmCacheBase> c = NewSsmCache(batched, rows, s);
  r.Int(&c->columns_, 0, std::numeric_limits<int32_t>::max(), "columns");
  // Vectors are read as encoded (their counts bounded by the input); their
  // sizes are invariants of the cache.
  r.Vector(&c->state_, -1, "states");
  r.Vector(&c->active_, -1, "active buffers");
  r.Vector(&c->next_, -1, "next positions");
  r.Bool(&c->armed_);
  r.Bool(&c->verified_);
  r.Vector(&c->snapshot_, -1, "snapshots");
  r.Vector(&c->round_real_, -1, "round sizes");
  if (!r.ok()) return r.status();
  // An armed cache's records follow, one per row, each at least its count.
  const size_t records = c->armed_ ? static_cast<size_t>(rows) : 0;
  if (records > r.left() / sizeof(uint64_t)) {
    return r.Fail("round records claim more than the input holds"), r.status();
  }
  c->record_.assign(records, {});
  for (auto& record : c->record_) r.Vector(&record, -1, "round record");
  if (!r.ok()) return r.status();
  const Status invariants = c->CheckInvariants();
  if (!invariants.ok()) return r.Fail(invariants.message()), r.status();
  c->StatesFromTraceOrder();  // sizes checked by the invariants
  *out = std::move(c);
  return Status::Ok();
}

}  // namespace kvspec
