// Layer shapes and forwards for the properties that build layouts
// directly (not from trace text), drawn from a source of choices
// (testing/choices.h); in a property, through testing::RcChoices so that a
// failure shrinks each draw.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvspec/base/layer_config.h"
#include "kvspec/testing/choices.h"

namespace kvspec::testing {

// 1-3 small layers named l0, l1, ...: kv, kv with a window (1-5), rotating
// (window 1-5, capacity up to window + 2) or ssm (one key head), heads 1-2,
// dim 1-8 (dk 1-5, dv 1-4, conv 1-3); attention layers' storage types
// from DrawKvType.
std::vector<LayerConfig> SmallLayers(Choices& c);

// 1-3 small layers named l0, l1, ...: kv (grouped-query: 1-2 query heads
// per KV head), kv with a window (1-4), rotating (window 1-4, capacity
// window + 0, 1 or 3, often the same as an earlier ring's, so that they
// share a mask) or ssm (1-2 key heads, value heads a multiple; dk 1-4, dv
// 1-3, conv 1-3); heads 1-2, dim 1-4; storage types from DrawKvType.
std::vector<LayerConfig> SmallGroupedLayers(Choices& c);

// 1-3 layers named l0, l1, ... of every kind in proportion 2 kv, 1 kv
// with a window (1-8), 2 rotating, 1 ssm: heads 1-3, 1-2 query heads per
// KV head, dim 1-20; rings (capacity window + 0, 0, 1 or 3) often take an
// earlier ring's shape, so that several read one mask; ssm: 1-2 key heads,
// value heads key heads times 1-2, dk 1-8, dv 1-5, conv 1-4 (dim as drawn);
// attention layers' storage types from DrawKvType.
std::vector<LayerConfig> MixedLayers(Choices& c);

// The storage type of an attention layer of `*dim` values per head: f32
// about three times in four, else bf16, q8_0 or q4_0; a block type (q8_0,
// q4_0) sets *dim to 32 or 64.
KvType DrawKvType(Choices& c, int* dim);

// The same as the ` kv=TYPE` key of a `layer` line ("" for f32), for the
// generators of trace text.
std::string DrawKvKey(Choices& c, int* dim);

// The columns and padding of one forward on held.size() rows.
struct PaddedColumns {
  int32_t columns = 1;
  std::vector<int32_t> left, right;  // [rows] pad columns
};

// 1..max_columns columns; with `pads`, left pads (0..L) on each row that
// holds no token yet (held[r] == 0), then right pads on every row up to
// what is left (a row may get no real token); without, none.
PaddedColumns DrawPaddedColumns(Choices& c, int32_t max_columns,
                                const std::vector<int32_t>& held, bool pads);

}  // namespace kvspec::testing
