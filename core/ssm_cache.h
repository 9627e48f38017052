// Recurrent gated-DeltaNet caches: SsmCache (kind "ssm", one row) and
// BatchedSsmCache ("batched_ssm").
//
// State per row: the causal-conv state (the last K - 1 pre-conv inputs of
// every channel, oldest first), kept in the conv kernel's channel-blocked
// order (kernels/conv1d.h; TRACE.md's order is [K-1][C]), and the recurrent
// state, fp32, kept in the gated delta kernel's order (kernels/gated_delta.h:
// each head in transposed tiles of 32 value columns). Whatever leaves the cache
// (RowStateHash, ConvStateTraceOrder, RecurrentStateTraceOrder, the codec)
// is in TRACE.md's orders ([K-1][C], [Hv][dv][dk]). Channels C = 2*Hk*dk + Hv*dv: the q part, the k part
// (key head kh owns kh*dk .. kh*dk+dk-1 of each), then the v part. Padding
// columns leave both states unchanged. The state does not grow:
// bytesPerToken() is 0; the cache is never trimmable.
//
// Speculative rounds without a state copy: two state buffers per row.
// ArmRound() marks each row's current buffer as the snapshot; the verify
// forward reads the snapshot and writes the other buffer, recording each
// token's position-local kernel inputs (pre-conv x; prepared q, k; v; gate;
// beta). Commit() keeps the result; Rollback(keep) points a row back at its
// snapshot and replays the first keep[r] recorded tokens through the same
// step functions, so the state is byte-identical to a run that only ever
// saw the accepted tokens.
//
// Invariants (SsmCacheBase::CheckInvariants, cheap ones first):
//  1. Shape: rows, value heads, key heads, dk, dv >= 1; key heads divide
//     value heads; 1 <= conv <= kMaxConvKernel.
//  2. Sizes: one buffer holds conv + recurrent floats; the states hold
//     rows*2 buffers; active buffers and next positions one per row.
//  3. Counters: columns >= 0; per row the active buffer is 0 or 1 and
//     0 <= next <= columns.
//  4. Round: verified only when armed; snapshots, round sizes and records
//     one per row while armed, none otherwise.
//  5. Per row while armed: the snapshot is buffer 0 or 1; 0 <= round size
//     <= next, and 0 before the verify forward; the active buffer is the
//     snapshot unless the verify forward wrote a real token (then the
//     other one); the record holds round size * RecordFloats() floats.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "kvspec/core/cache.h"
#include "kvspec/core/invariants.h"
#include "kvspec/kernels/aligned_vector.h"
#include "kvspec/kernels/gated_delta.h"

namespace kvspec {

struct SsmShape {
  int value_heads = 1;  // Hv
  int key_heads = 1;    // Hk, divides Hv
  int dk = 4;
  int dv = 4;
  int conv = 4;  // K, 1..kMaxConvKernel
  bool gate_per_lane = false;

  size_t Channels() const {
    return 2 * static_cast<size_t>(key_heads) * dk + static_cast<size_t>(value_heads) * dv;
  }
  size_t ConvFloats() const { return static_cast<size_t>(conv - 1) * Channels(); }
  size_t RecurrentFloats() const {
    return static_cast<size_t>(value_heads) * dv * dk;
  }
  size_t GateFloats() const {
    return static_cast<size_t>(value_heads) * (gate_per_lane ? dk : 1);
  }
  GatedDeltaShape Delta() const;
};

// One recurrent layer's inputs and outputs for a forward of L columns.
struct SsmIO {
  const float* conv_weights = nullptr;  // [K][C], w[K-1] multiplies the current token
  const float* x = nullptr;             // [rows][L][C] pre-conv inputs
  const float* gate = nullptr;          // [rows][L][Hv] (or [rows][L][Hv][dk])
  const float* beta = nullptr;          // [rows][L][Hv]
  float* y = nullptr;                   // [rows][L][Hv][dv]; may be null
  // Optional, not owned: the gated delta step's value heads run on it
  // (kernels/gated_delta.h); the states and outputs are bit-identical
  // whatever its thread count.
  ThreadPool* pool = nullptr;
  // Optional (last, so that aggregate initialisations of the fields above
  // keep their meaning): the same weights packed by PackConvWeights
  // (kernels/conv1d.h), packed once by the layer's owner. When null, each
  // Forward packs conv_weights into the cache's scratch first (K*C floats
  // copied per call, which a decode step of one token pays in full).
  const float* packed_conv_weights = nullptr;
};

class SsmCacheBase : public Cache {
 public:
  const SsmCacheBase* AsRecurrent() const final { return this; }
  SsmCacheBase(int rows, const SsmShape& shape);
  // Bytes the constructor allocates that grow with the shape: both state
  // buffers of every row and one token's scratch.
  static size_t BytesWhenBuilt(int rows, const SsmShape& shape);

  int rows() const override { return rows_; }
  int64_t columns() const override { return columns_; }
  std::vector<int32_t> positions() const override { return next_; }
  const std::vector<int32_t>& positionsRef() const override { return next_; }
  size_t bytesPerToken() const override { return 0; }
  size_t allocatedBytes() const override;
  bool isTrimmable() const override { return false; }
  Status CheckTrim(int32_t n, bool bypass) const override;
  Status trim(int32_t n, bool bypass = false) override;
  void HashState(Hasher* hasher) const override;

  const SsmShape& shape() const { return shape_; }
  Status CheckForward(const ForwardColumns& cols) const;
  // What a verify forward of the accepted `cols` allocates (round sizes,
  // records), reserved aside: a layout reserves every layer's growth before
  // it writes any. Changes nothing (std::bad_alloc may escape: the caller
  // refuses). Empty when no round is armed.
  struct ForwardSpace {
    std::vector<int32_t> round_real;
    std::vector<std::vector<float>> record;
  };
  void ReserveForward(const ForwardColumns& cols, ForwardSpace* space) const;
  // The forward with the storage reserved for these `cols`: allocates nothing.
  Status ForwardReserved(const ForwardColumns& cols, const SsmIO& io, ForwardSpace* space);
  // Reserves, then runs the forward (all or nothing for this cache).
  Status Forward(const ForwardColumns& cols, const SsmIO& io);

  bool armed() const { return armed_; }
  bool verified() const { return verified_; }
  // Real tokens per row of the round's verify forward (empty when not armed).
  const std::vector<int32_t>& roundReal() const { return round_real_; }
  // Use the scalar reference kernels instead of the Highway ones (for
  // differential checks; a state mixes both only if switched mid-run).
  void set_reference_kernels(bool on) { reference_ = on; }
  Status ArmRound();
  Status Commit();
  Status CheckRollback(const std::vector<int32_t>& keep) const;
  // keep: one count per row, at most the row's real tokens in the round.
  Status Rollback(const std::vector<int32_t>& keep);

  // The row's current states, in the kernels' orders.
  const float* ConvState(int row) const;       // kernel order (kernels/conv1d.h)
  const float* RecurrentState(int row) const;  // kernel order (tiled)
  // A copy of the row's conv state in trace order [K-1][C].
  std::vector<float> ConvStateTraceOrder(int row) const;
  // A copy of the row's recurrent state in trace order [Hv][dv][dk].
  std::vector<float> RecurrentStateTraceOrder(int row) const;
  // Hasher (core/cache.h) over the row's conv state bytes, then its recurrent
  // state bytes, both in trace order.
  uint64_t RowStateHash(int row) const;

  // Batch lifecycle building blocks (used by core/batch.h); refused rounds
  // are the caller's business: sources must not be armed.
  struct RowSource {
    const SsmCacheBase* cache;
    int row;
  };
  bool SameShape(const SsmCacheBase& other) const;
  // Fills this store (rows() == sources.size()) with the sources' rows.
  void GatherRows(const std::vector<RowSource>& sources, int64_t columns);

  // The invariants listed at the top of this file; an error names the first
  // broken one.
  Status CheckInvariants() const override;

 private:
  friend class CacheCodec;
  friend struct InvariantsTestAccess;  // core/invariants_test_access.h: tests corrupt states
  Status CheckRound(int row) const;  // invariant 5 of one row
  float* Buffer(int row, int which) {
    return &state_[(static_cast<size_t>(row) * 2 + which) * row_floats_];
  }
  const float* Buffer(int row, int which) const {
    return &state_[(static_cast<size_t>(row) * 2 + which) * row_floats_];
  }
  // One token: conv, prepare, recurrence; src may equal dst. Records the
  // position-local inputs into rec when non-null.
  // w: packed conv weights.
  void Step(const float* src, float* dst, const float* w, const float* x, const float* gate,
            const float* beta, float* y, std::vector<float>* rec, ThreadPool* pool);
  // Replays one recorded token (layout of Step's record).
  void Replay(const float* src, float* dst, const float* rec);
  size_t RecordFloats() const;
  // The codec's format is state_ with every buffer's conv and recurrent
  // states in trace order. BufferTraceOrder writes buffer b (row b / 2,
  // buffer b % 2) of state_ in that order to out[0, row_floats_);
  // StatesFromTraceOrder converts state_ read in that order back in place,
  // one buffer at a time through a buffer-sized scratch (so neither needs a
  // copy of every state).
  void BufferTraceOrder(size_t b, float* out) const;
  void StatesFromTraceOrder();

  int rows_;
  SsmShape shape_;
  size_t row_floats_;              // conv + recurrent floats of one buffer
  AlignedVector<float> state_;     // [rows][2][conv | recurrent], 64-byte aligned
  std::vector<uint8_t> active_;    // [rows] current buffer (0 or 1)
  std::vector<int32_t> next_;      // [rows]
  int64_t columns_ = 0;

  bool armed_ = false;
  bool verified_ = false;
  std::vector<uint8_t> snapshot_;            // [rows] buffer holding the pre-round state
  std::vector<int32_t> round_real_;          // [rows] real tokens of the verify forward
  std::vector<std::vector<float>> record_;   // [rows] recorded token inputs
  std::vector<float> scratch_;               // u, q, k, y of one token
  std::vector<float> packed_;                // [K*C] weights packed when SsmIO has none
  bool reference_ = false;
};

class SsmCache final : public WithKind<SsmCache, SsmCacheBase> {
 public:
  static constexpr std::string_view kKind = kKindSsm;
  explicit SsmCache(const SsmShape& shape) : WithKind(1, shape) {}
  std::unique_ptr<Cache> Copy() const override {
    auto copy = std::make_unique<SsmCache>(*this);
    KVSPEC_ASSERT_INVARIANTS(*copy, "SsmCache::Copy");
    return copy;
  }
};

class BatchedSsmCache final : public WithKind<BatchedSsmCache, SsmCacheBase> {
 public:
  static constexpr std::string_view kKind = kKindBatchedSsm;
  BatchedSsmCache(int rows, const SsmShape& shape) : WithKind(rows, shape) {}
  std::unique_ptr<Cache> Copy() const override {
    auto copy = std::make_unique<BatchedSsmCache>(*this);
    KVSPEC_ASSERT_INVARIANTS(*copy, "BatchedSsmCache::Copy");
    return copy;
  }
};

std::unique_ptr<SsmCacheBase> NewSsmCache(bool batched, int rows, const SsmShape& shape);

}  // namespace kvspec
