// Test-only access to the private state of the column store, the recurrent
// caches and the layout: the friend they name, for tests that corrupt one
// field and check that CheckInvariants (or an operation) names the break.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kvspec/base/layer_config.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/kernels/mask.h"

namespace kvspec {

struct InvariantsTestAccess {
  static int& Rows(ColumnStore& c) { return c.rows_; }
  static int& KvHeads(ColumnStore& c) { return c.kv_heads_; }
  static int& Dim(ColumnStore& c) { return c.dim_; }
  static int32_t& Window(ColumnStore& c) { return c.window_; }
  static int32_t& RingCapacity(ColumnStore& c) { return c.ring_capacity_; }
  static size_t& Slots(ColumnStore& c) { return c.slots_; }
  static size_t& First(ColumnStore& c) { return c.first_; }
  static int64_t& Held(ColumnStore& c) { return c.held_; }
  static std::vector<int32_t>& Next(ColumnStore& c) { return c.next_; }
  static std::vector<int64_t>& HeldPads(ColumnStore& c) { return c.held_pads_; }
  static int64_t& Columns(ColumnStore& c) { return c.columns_; }
  static std::vector<int32_t>& SlotPositions(ColumnStore& c) { return c.slot_pos_; }
  static int64_t& Peak(ColumnStore& c) { return c.peak_; }
  static int64_t& PeakBeforeWrite(ColumnStore& c) { return c.peak_before_write_; }
  static std::vector<int32_t>& LastWriteReal(ColumnStore& c) { return c.last_write_real_; }
  static bool& LastWriteWasDecode(ColumnStore& c) { return c.last_write_was_decode_; }

  static int& Rows(SsmCacheBase& c) { return c.rows_; }
  static SsmShape& Shape(SsmCacheBase& c) { return c.shape_; }
  static std::vector<uint8_t>& Active(SsmCacheBase& c) { return c.active_; }
  static std::vector<int32_t>& Next(SsmCacheBase& c) { return c.next_; }
  static int64_t& Columns(SsmCacheBase& c) { return c.columns_; }
  static bool& Verified(SsmCacheBase& c) { return c.verified_; }
  static std::vector<uint8_t>& Snapshots(SsmCacheBase& c) { return c.snapshot_; }
  static std::vector<int32_t>& RoundReal(SsmCacheBase& c) { return c.round_real_; }
  static std::vector<std::vector<float>>& Records(SsmCacheBase& c) { return c.record_; }

  static int& Rows(Layout& l) { return l.rows_; }
  static std::vector<std::unique_ptr<Cache>>& Layers(Layout& l) { return l.layers_; }
  static std::vector<LayerConfig>& Configs(Layout& l) { return l.configs_; }
  static std::vector<Mask>& Masks(Layout& l) { return l.masks_; }
  static std::vector<int32_t>& MaskCapacity(Layout& l) { return l.mask_capacity_; }
  static std::vector<int>& MaskOfLayer(Layout& l) { return l.mask_of_layer_; }
  static std::vector<int32_t>& BypassBound(Layout& l) { return l.bypass_bound_; }
};

}  // namespace kvspec
