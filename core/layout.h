// A model's caches, one per layer, driven together.
//
// The layout builds each layer's cache (the batched variant when rows > 1),
// runs forwards across every layer, builds the masks once per forward and
// per distinct (window, ring capacity) and hands each layer its own, runs
// speculative rounds, and makes every operation all-or-nothing: a refused
// operation returns an error and leaves every layer bit-identical.
//
// Hostile calls: every operation first checks the cheap invariants (a
// refusal when they are broken, in every build) and no exception escapes.
// Create, CopyTo, Forward, Filter, Join and Extract allocate everything
// (a refusal's message included) before they change anything, so running
// out of memory is a refusal that leaves the state unchanged
// (core/allocation_failure_test.cc fails every allocation of them in
// turn). Fatal instead (kvspec::Fatal aborts with a
// message): running out of memory inside Trim or Accept (they allocate a
// little scratch while they change the layers), in Copy() (it returns a
// pointer: use CopyTo), or in the attention kernels' scratch after a
// forward wrote the caches.
//
// Invariants (Layout::CheckInvariants, cheap ones first):
//  1. At least one row and one layer; one config per layer.
//  2. Every layer's cache holds its own invariants, has the layout's row
//     count (a batched kind when rows > 1) and is the cache its config
//     describes (kind and shape; query heads a multiple of heads).
//  3. Lockstep: every layer has layer 0's columns and positions.
//  4. Layers that share a mask (same window and ring capacity) are at the
//     same physical phase (ColumnStore::SamePhase).
//  5. Mask bookkeeping: one mask capacity per mask, one mask index per
//     layer, -1 or a mask of the layer's window and capacity whose slots,
//     phase and slot positions are the layer's own.
//  6. Round state: the bypass bound is empty or one per row in [0, next];
//     verified only when armed; verify sizes one per row in [0, next] when
//     verified, none otherwise; every recurrent layer is armed and verified
//     as the layout is, with the layout's verify sizes as its round sizes.
//  7. The bound of a bypass trim or an accept (the verify sizes when
//     verified, else the bypass bound) lies within every attention layer's
//     last write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvspec/kernels/attention.h"
#include "kvspec/core/cache.h"
#include "kvspec/core/invariants.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/base/layer_config.h"
#include "kvspec/core/mask_builder.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/base/status.h"

namespace kvspec {


// One layer's inputs and outputs for a forward of L columns: q/k/v/out for
// an attention layer, ssm for a recurrent one.
struct AttentionIO {
  AttentionIO() = default;
  AttentionIO(const float* q_in, const float* k_in, const float* v_in, float* out_in)
      : q(q_in), k(k_in), v(v_in), out(out_in) {}
  explicit AttentionIO(const SsmIO& ssm_in) : ssm(ssm_in) {}

  const float* q = nullptr;  // [rows][L][q_heads][dim]
  const float* k = nullptr;  // [rows][L][heads][dim]
  const float* v = nullptr;  // [rows][L][heads][dim]
  float* out = nullptr;      // [rows][L][q_heads][dim]; may be null (append only)
  SsmIO ssm;
};
using LayerIO = AttentionIO;

class Layout {
 public:
  static Status Create(int rows, std::vector<LayerConfig> layers,
                       std::unique_ptr<Layout>* out);
  // An explicit deep copy (round state and last masks' windows included).
  // Copy() aborts (kvspec::Fatal) when memory runs out; CopyTo refuses.
  std::unique_ptr<Layout> Copy() const;
  Status CopyTo(std::unique_ptr<Layout>* out) const;

  int rows() const { return rows_; }
  size_t size() const { return layers_.size(); }
  const LayerConfig& config(size_t layer) const { return configs_[layer]; }
  const Cache& cache(size_t layer) const { return *layers_[layer]; }
  // The layer as an attention cache, or null for a recurrent layer.
  const AttentionCache* attention(size_t layer) const;
  // The layer as a recurrent cache, or null for an attention layer.
  const SsmCacheBase* recurrent(size_t layer) const;

  std::vector<int32_t> positions() const { return layers_[0]->positions(); }
  int64_t columns() const { return layers_[0]->columns(); }
  size_t allocatedBytes() const;
  // Storage bytes if a forward of `columns` columns were appended now.
  size_t BytesAfterForward(int32_t columns) const;

  // One forward: append to every layer, build masks, attend, run the
  // recurrent layers. io has one entry per layer.
  Status CheckForward(const ForwardColumns& cols) const;
  Status Forward(const ForwardColumns& cols, const std::vector<AttentionIO>& io);

  Status Trim(int32_t n, bool bypass);

  // Speculative rounds: Arm, one verify forward, then Accept with one keep
  // count for every row or one per row.
  Status Arm();
  Status Accept(const std::vector<int32_t>& keep);
  bool armed() const { return armed_; }
  bool verified() const { return verified_; }

  // Batch lifecycle (core/batch.h) across every layer, all or nothing;
  // refused while a round is armed (on either side of a join).
  Status Filter(const std::vector<int32_t>& rows);
  Status Join(const Layout& other);
  Status Extract(int32_t row, std::unique_ptr<Layout>* out) const;
  // What Filter(rows), Join(other) and Extract(row) allocate for the new
  // layers, computed without allocating (core/batch.h FilterRowsBytes and
  // the rest, summed over the layers; 0 for a call that is refused), so a
  // memory budget can be checked first. This layout's own storage stays
  // allocated while they build the new layers.
  size_t BytesAfterFilter(const std::vector<int32_t>& rows) const;
  size_t BytesAfterJoin(const Layout& other) const;
  size_t BytesOfExtract(int32_t row) const;

  // The mask layer `layer` read in the last forward; null when there was
  // none since the last change. Valid until the next operation.
  const Mask* LastMask(size_t layer) const;

  // Forgets that the last change was a window (a bypass trim is then
  // refused): what a trace's `reload` means (TRACE.md precise rule 3).
  void ForgetBypassBound() {
    bypass_bound_.clear();
    KVSPEC_ASSERT_INVARIANTS(*this, "Layout::ForgetBypassBound");
  }

  // Run every kernel as its scalar reference (differential checks).
  void set_reference_kernels(bool on);
  bool reference_kernels() const { return reference_kernels_; }

  // Every byte of state, for "refused operations change nothing" checks.
  uint64_t StateHash() const;

  // The invariants listed at the top of this file; an error names the first
  // broken one.
  Status CheckInvariants() const;

 private:
  friend class CacheCodec;
  friend struct InvariantsTestAccess;  // core/invariants_test_access.h: tests corrupt states
  Layout() = default;
  void ForgetLastForward();
  Status CheckLayer(size_t layer) const;       // invariants 2-4 of one layer
  Status CheckMaskOfLayer(size_t layer) const; // invariant 5 of one layer
  Status CheckRoundState() const;              // invariants 6-7
  // The cheap invariants (1, 3, the sizes of 5, 6-7; O(rows x layers)),
  // checked at the start of every operation in every build: a refusal
  // naming `operation` when one is broken.
  Status CheckBeforeChange(const char* operation) const;
  std::unique_ptr<Layout> CopyUnchecked() const;
  // attention(i) and recurrent(i) of a layer this layout owns, to change.
  AttentionCache* MutableAttention(size_t layer) {
    return const_cast<AttentionCache*>(layers_[layer]->AsAttention());
  }
  SsmCacheBase* MutableRecurrent(size_t layer) {
    return const_cast<SsmCacheBase*>(layers_[layer]->AsRecurrent());
  }
  struct ForwardSpace;
  void ReserveForward(const ForwardColumns& cols, ForwardSpace* space) const;
  void WriteForward(const ForwardColumns& cols, const std::vector<AttentionIO>& io,
                    ForwardSpace* space);

  int rows_ = 0;
  std::vector<LayerConfig> configs_;
  std::vector<std::unique_ptr<Cache>> layers_;

  // Masks of the last forward, one per distinct window, and which one each
  // layer read (-1: none).
  std::vector<Mask> masks_;
  std::vector<int32_t> mask_capacity_;  // ring capacity of each mask's layers
  std::vector<int> mask_of_layer_;

  // Real tokens per row of the last change when it was a window (the bound
  // of a bypass trim); empty otherwise.
  std::vector<int32_t> bypass_bound_;

  bool armed_ = false;
  bool verified_ = false;
  std::vector<int32_t> verify_real_;  // real tokens per row of the verify forward
  bool reference_kernels_ = false;
};

}  // namespace kvspec
