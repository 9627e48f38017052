// Attention caches. Plain: KvCache (kind "kv", one row) and BatchedKvCache
// ("batched_kv"), where every column written stays until trimmed. Rings:
// RotatingCache ("rotating") and BatchedRotatingCache ("batched_rotating"),
// sliding-window caches of capacity M >= window.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "kvspec/core/cache.h"
#include "kvspec/core/invariants.h"
#include "kvspec/core/mask_builder.h"
#include "kvspec/kernels/aligned_vector.h"
#include "kvspec/kernels/kv_view.h"

namespace kvspec {

// The storage one append needs, allocated aside before anything changes
// (ColumnStore::ReserveAppend), so that a layout can reserve every layer's
// growth first and then write all of them without allocating.
struct AppendSpace {
  size_t slots = 0;                // the buffer's slots after the append
  bool relayout = false;           // k, v and pos are the new buffer
  AlignedVector<uint8_t> k, v;     // [rows][kv_heads][slots] stored head rows
  std::vector<int32_t> pos;        // [rows][slots]
  std::vector<int32_t> last_write; // [rows]
};

// What every attention cache (plain or ring) offers a layout.
class AttentionCache : public Cache {
 public:
  const AttentionCache* AsAttention() const final { return this; }
  virtual int kvHeads() const = 0;
  virtual int headDim() const = 0;
  // How keys and values are stored (KvType: f32, bf16, q8_0, q4_0).
  virtual KvType kvType() const = 0;
  // The layer's sliding window (kNoWindow: none); decides its mask.
  virtual int32_t window() const = 0;
  // Ring capacity (0: a plain cache). Layers that agree on window and ring
  // capacity share one mask, and must stay in lockstep.
  virtual int32_t ringCapacity() const = 0;

  // Appends one forward's columns. k and v: [rows][L][kv_heads][dim],
  // pad columns included (their contents are stored but never visible),
  // each head row stored as kvType() (rounded or quantized once, here).
  virtual Status CheckAppend(const ForwardColumns& cols) const = 0;
  // Allocates into `space` what appending the accepted `cols` needs; changes
  // nothing (std::bad_alloc may escape: the caller refuses).
  virtual void ReserveAppend(const ForwardColumns& cols, AppendSpace* space) const = 0;
  // Appends with the storage reserved for these `cols`: allocates nothing.
  virtual Status AppendReserved(const ForwardColumns& cols, const float* k, const float* v,
                                AppendSpace* space) = 0;
  // Reserves, then appends (all or nothing for this cache).
  Status Append(const ForwardColumns& cols, const float* k, const float* v) {
    KVSPEC_RETURN_IF_ERROR(CheckAppend(cols));
    AppendSpace space;
    ReserveAppend(cols, &space);
    return AppendReserved(cols, k, v, &space);
  }
  // Drops row r's last drop[r] real tokens (the rejected tips of a verify
  // window); rows may drop different counts. Valid only right after a
  // window write holding at least drop[r] real tokens in row r.
  virtual Status CheckDropTips(const std::vector<int32_t>& drop) const = 0;
  virtual Status DropTips(const std::vector<int32_t>& drop) = 0;
  // Storage bytes after appending `columns` more columns.
  virtual size_t BytesAfterAppend(int32_t columns) const = 0;

  virtual KvView View() const = 0;
  // Real tokens of a row in logical order, as slot indices.
  virtual std::vector<int32_t> LogicalSlots(int row) const = 0;
};

// Shared implementation of the plain and ring caches: a per-row store of
// columns in a physical buffer of S slots used as a ring. The held columns
// are the most recent ones, in logical order from slot first_ onwards
// (wrapping). A plain cache (ring_capacity 0) never overwrites: its buffer
// grows geometrically: to max(needed, S + S / 2, 16) slots when an append needs more than S. A ring of capacity M >= window W overwrites its
// oldest columns but always keeps what the next forward's earliest query
// needs: the columns holding every row's last W - 1 real tokens (more than
// W - 1 columns when pad columns sit between them; all of a row's tokens
// while it holds at most M, so that an extracted row is still trimmable)
// plus the whole forward, and every column while it has not wrapped, so
// that a trim can still drop any of them. Its buffer grows past M only when a write needs more, sized
// from the physical column count; a store built by the batch lifecycle
// (GatherRows, GatherRealTokens) holds only the columns it keeps, however
// large M, and grows to M at its next append.
//
// Invariants (CheckInvariants, cheap ones first; W window, M ring capacity,
// S slots, "real" a row's held slots that hold a position):
//  1. Shape: rows, kv heads, dim >= 1, window >= 0; a plain cache has M = 0,
//     a ring 1 <= W <= M.
//  2. Counters: 0 <= held <= columns <= peak; 0 <= peak before write <= peak.
//  3. Ring geometry: held <= S; first < S (first = 0 when S = 0). (A ring's
//     buffer is sized from what it holds: an append grows it to at least M,
//     a gather of rows to the columns they hold, never to M alone.)
//  4. A plain cache holds every column from slot 0 (held = columns,
//     first = 0); a ring that has not wrapped holds every column.
//  5. Sizes: keys and values rows*kv_heads*S stored head rows of
//     KvRowBytes(type, dim) bytes each, slot positions
//     rows*S, next and held pads one per row, last write empty or one per row.
//  6. Per row: 0 <= next <= columns.
//  7. Per row: each held slot holds -1 or a position below next, increasing
//     in logical order; a slot outside the held columns holds -1.
//  8. Per row: every token a later query or trim may need is held: its
//     newest held position is next - 1, and it holds all next tokens, or the
//     last min(next, W - 1) once wrapped with next > M.
//  9. Per row: 0 <= last write <= real; the last write is a decode only if
//     there is a last write.
// 10. Per row: held pads = the held columns that hold -1.
class ColumnStore : public AttentionCache {
 public:
  ColumnStore(int rows, int kv_heads, int dim, int32_t window, int32_t ring_capacity,
              KvType type = KvType::kF32);
  const ColumnStore* AsColumnStore() const final { return this; }

  int rows() const override { return rows_; }
  int64_t columns() const override { return columns_; }
  std::vector<int32_t> positions() const override { return next_; }
  const std::vector<int32_t>& positionsRef() const override { return next_; }
  size_t bytesPerToken() const override;
  size_t allocatedBytes() const override;
  bool isTrimmable() const override;
  Status CheckTrim(int32_t n, bool bypass) const override;
  Status trim(int32_t n, bool bypass = false) override;
  void HashState(Hasher* hasher) const override;

  int kvHeads() const override { return kv_heads_; }
  int headDim() const override { return dim_; }
  KvType kvType() const override { return type_; }
  int32_t window() const override { return window_; }
  Status CheckAppend(const ForwardColumns& cols) const override;
  void ReserveAppend(const ForwardColumns& cols, AppendSpace* space) const override;
  Status AppendReserved(const ForwardColumns& cols, const float* k, const float* v,
                        AppendSpace* space) override;
  Status CheckDropTips(const std::vector<int32_t>& drop) const override;
  Status DropTips(const std::vector<int32_t>& drop) override;
  size_t BytesAfterAppend(int32_t columns) const override;
  KvView View() const override;
  std::vector<int32_t> LogicalSlots(int row) const override;

  // Ring capacity M (0: a plain cache that keeps everything).
  int32_t ringCapacity() const override { return ring_capacity_; }
  // Whether the columns held per row have ever exceeded the ring capacity.
  bool wrapped() const { return ring_capacity_ > 0 && peak_ > ring_capacity_; }
  // Physical slots of the buffer (S).
  size_t physicalSlots() const { return slots_; }

  // Batch lifecycle building blocks (used by core/batch.h).
  struct RowSource {
    const ColumnStore* store;
    int row;
  };
  // Same kind family and shape (heads, dim, storage type, window, ring
  // capacity).
  bool SameShape(const ColumnStore& other) const;
  // Fills this empty store (rows() == sources.size()) with the sources'
  // rows, each right-justified in `columns` columns: a row whose store has
  // fewer columns gets left padding in front. Every held column of every
  // source is kept, in logical order; the ring phase restarts at slot 0.
  void GatherRows(const std::vector<RowSource>& sources, int64_t columns, int64_t peak);
  // The slots per row GatherRows(sources, columns, ..) allocates: the most
  // columns a source holds (a plain cache: all `columns`), not M.
  static int64_t GatheredSlots(const std::vector<RowSource>& sources, int64_t columns);
  // Fills this empty single-row store with the real tokens of src's row, as
  // a cache fed only them: no pad columns. A ring whose row lost a token it
  // would still hold physically counts as wrapped (not trimmable).
  void GatherRealTokens(const ColumnStore& src, int row);
  // Real tokens row `row` physically holds: the slots GatherRealTokens
  // allocates.
  int64_t HeldTokens(int row) const;
  // Bytes of keys, values and slot positions of `rows` rows of `slots`
  // slots (what allocatedBytes() reports for that buffer).
  static size_t StorageBytes(int rows, int kv_heads, int dim, KvType type, int64_t slots);
  int64_t peak() const { return peak_; }
  // Real tokens per row of the last write; empty after any other change.
  const std::vector<int32_t>& lastWriteReal() const { return last_write_real_; }
  // Same physical phase as `other` (layers sharing a mask must be): slots,
  // oldest slot, held columns, slot positions, peak and last write.
  bool SamePhase(const ColumnStore& other) const;

  // The invariants listed at the class; an error names the first broken one.
  Status CheckInvariants() const override;

 protected:
  friend class CacheCodec;
  friend struct InvariantsTestAccess;  // core/invariants_test_access.h: tests corrupt states
  // Invariants 1-9: everything but the held pads, which are derived from the
  // slot positions (the codec recomputes them once these hold).
  Status CheckStoredState() const;
  Status CheckRow(int row) const;  // invariants 6-9 of one row
  // Older columns a write must keep: all while not wrapped, else W - 1.
  int64_t ColumnsToKeep() const;
  // Buffer size after appending `columns` columns.
  size_t SlotsAfterAppend(int32_t columns) const;
  size_t Slot(int64_t logical) const {  // physical slot of held column `logical`
    return (first_ + static_cast<size_t>(logical)) % slots_;
  }
  // Moves the newest `keep` held columns to slots 0.. of the buffer reserved
  // in `space` (of space->slots slots).
  void Relayout(AppendSpace* space, int64_t keep);
  void CopyColumn(int row, size_t from_slot, size_t to_slot);
  // Removes row r's last drop[r] real tokens (pads after them shift left).
  void Drop(const std::vector<int32_t>& drop);

  int rows_;
  int kv_heads_;
  int dim_;
  KvType type_;
  size_t row_bytes_;               // KvRowBytes(type_, dim_): one stored head row
  int32_t window_;
  int32_t ring_capacity_;
  int64_t columns_ = 0;            // logical columns per row (pads included)
  int64_t peak_ = 0;               // most columns ever held (wrap detection)
  int64_t peak_before_write_ = 0;  // peak_ before the last write
  size_t slots_ = 0;               // S: physical slots per row
  size_t first_ = 0;               // slot of the oldest held column
  int64_t held_ = 0;               // columns physically held (<= S)
  AlignedVector<uint8_t> k_, v_;   // [rows][kv_heads][S] head rows, 64-byte aligned
  std::vector<int32_t> slot_pos_;  // [rows][S]; -1: no visible token
  std::vector<int32_t> next_;      // [rows] next position
  // Pad columns among each row's held columns: while no row holds one, a
  // wrapped ring keeps exactly W - 1 columns without scanning.
  std::vector<int64_t> held_pads_;
  void CountHeldPads();
  // Real tokens per row of the last write (empty after any other change):
  // the bound of DropTips, and of a bypass trim when it was not a decode.
  std::vector<int32_t> last_write_real_;
  bool last_write_was_decode_ = false;
};

class KvCache final : public WithKind<KvCache, ColumnStore> {
 public:
  static constexpr std::string_view kKind = kKindKv;
  explicit KvCache(int kv_heads, int dim, int32_t window = kNoWindow,
                   KvType type = KvType::kF32)
      : WithKind(1, kv_heads, dim, window, 0, type) {}
  std::unique_ptr<Cache> Copy() const override {
    auto copy = std::make_unique<KvCache>(*this);
    KVSPEC_ASSERT_INVARIANTS(*copy, "KvCache::Copy");
    return copy;
  }
};

class BatchedKvCache final : public WithKind<BatchedKvCache, ColumnStore> {
 public:
  static constexpr std::string_view kKind = kKindBatchedKv;
  BatchedKvCache(int rows, int kv_heads, int dim, int32_t window = kNoWindow,
                 KvType type = KvType::kF32)
      : WithKind(rows, kv_heads, dim, window, 0, type) {}
  std::unique_ptr<Cache> Copy() const override {
    auto copy = std::make_unique<BatchedKvCache>(*this);
    KVSPEC_ASSERT_INVARIANTS(*copy, "BatchedKvCache::Copy");
    return copy;
  }
};

class RotatingCache final : public WithKind<RotatingCache, ColumnStore> {
 public:
  static constexpr std::string_view kKind = kKindRotating;
  RotatingCache(int kv_heads, int dim, int32_t window, int32_t capacity,
                KvType type = KvType::kF32)
      : WithKind(1, kv_heads, dim, window, capacity, type) {}
  std::unique_ptr<Cache> Copy() const override {
    auto copy = std::make_unique<RotatingCache>(*this);
    KVSPEC_ASSERT_INVARIANTS(*copy, "RotatingCache::Copy");
    return copy;
  }
};

class BatchedRotatingCache final : public WithKind<BatchedRotatingCache, ColumnStore> {
 public:
  static constexpr std::string_view kKind = kKindBatchedRotating;
  BatchedRotatingCache(int rows, int kv_heads, int dim, int32_t window, int32_t capacity,
                       KvType type = KvType::kF32)
      : WithKind(rows, kv_heads, dim, window, capacity, type) {}
  std::unique_ptr<Cache> Copy() const override {
    auto copy = std::make_unique<BatchedRotatingCache>(*this);
    KVSPEC_ASSERT_INVARIANTS(*copy, "BatchedRotatingCache::Copy");
    return copy;
  }
};

// A plain (ring_capacity 0) or ring cache of the given shape, of the
// single-row kind when !batched (then rows must be 1).
std::unique_ptr<ColumnStore> NewColumnStore(bool batched, int rows, int kv_heads, int dim,
                                            int32_t window, int32_t ring_capacity,
                                            KvType type = KvType::kF32);

// Checks `cols` against a batch of rows with next positions `next` and
// `columns` columns so far: row count, left + right <= L, left padding only
// on an empty row, no position or column count past kMaxPosition.
Status CheckForwardColumns(const ForwardColumns& cols, const std::vector<int32_t>& next,
                           int64_t columns);

}  // namespace kvspec
