#include "kvspec/testing/shape_generators.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kvspec::testing {

std::vector<LayerConfig> SmallLayers(Choices& c) {
  std::vector<LayerConfig> layers;
  const int n = static_cast<int>(c.Range(1, 3));
  for (int i = 0; i < n; ++i) {
    LayerConfig l;
    l.name = "l" + std::to_string(i);
    const int kind = static_cast<int>(c.Range(0, 3));
    l.heads = static_cast<int>(c.Range(1, 2));
    l.dim = static_cast<int>(c.Range(1, 8));
    if (kind == 1) l.window = static_cast<int32_t>(c.Range(1, 5));
    if (kind == 2) {
      l.kind = CacheKind::kRotating;
      l.window = static_cast<int32_t>(c.Range(1, 5));
      l.capacity = l.window + static_cast<int32_t>(c.Range(0, 2));
    }
    if (kind == 3) {
      l.kind = CacheKind::kSsm;
      l.kheads = 1;
      l.heads = static_cast<int>(c.Range(1, 2));
      l.dk = static_cast<int>(c.Range(1, 5));
      l.dv = static_cast<int>(c.Range(1, 4));
      l.conv = static_cast<int>(c.Range(1, 3));
    }
    if (l.kind != CacheKind::kSsm) l.kv = DrawKvType(c, &l.dim);
    layers.push_back(l);
  }
  return layers;
}

std::vector<LayerConfig> SmallGroupedLayers(Choices& c) {
  std::vector<LayerConfig> layers;
  const int count = static_cast<int>(c.Range(1, 3));
  for (int i = 0; i < count; ++i) {
    LayerConfig l;
    l.name = "l" + std::to_string(i);
    l.heads = static_cast<int>(c.Range(1, 2));
    l.q_heads = l.heads * static_cast<int>(c.Range(1, 2));
    l.dim = static_cast<int>(c.Range(1, 4));
    const int kind = static_cast<int>(c.Range(0, 4));
    if (kind == 4) {
      l.kind = CacheKind::kSsm;
      l.q_heads = 0;
      l.kheads = static_cast<int>(c.Range(1, 2));
      l.heads = l.kheads * static_cast<int>(c.Range(1, 2));
      l.dk = static_cast<int>(c.Range(1, 4));
      l.dv = static_cast<int>(c.Range(1, 3));
      l.conv = static_cast<int>(c.Range(1, 3));
    } else if (kind >= 2) {
      l.kind = CacheKind::kRotating;
      l.window = static_cast<int32_t>(c.Range(1, 4));
      l.capacity = l.window + static_cast<int32_t>(c.OneOf({0, 1, 3}));
      for (const LayerConfig& o : layers) {
        if (o.kind == CacheKind::kRotating && c.Bool()) {
          l.window = o.window;
          l.capacity = o.capacity;
        }
      }
    } else if (kind == 1) {
      l.window = static_cast<int32_t>(c.Range(1, 4));
    }
    if (l.kind != CacheKind::kSsm) l.kv = DrawKvType(c, &l.dim);
    layers.push_back(l);
  }
  return layers;
}

std::vector<LayerConfig> MixedLayers(Choices& c) {
  std::vector<LayerConfig> layers;
  const int count = static_cast<int>(c.Range(1, 3));
  for (int i = 0; i < count; ++i) {
    LayerConfig l;
    l.name = "l" + std::to_string(i);
    l.heads = static_cast<int>(c.Range(1, 3));
    const int group = static_cast<int>(c.Range(1, 2));
    l.q_heads = l.heads * group;
    l.dim = static_cast<int>(c.Range(1, 20));
    const int kind = static_cast<int>(c.Range(0, 5));  // 0-1 plain, 2 windowed, 3-4 ring, 5 ssm
    if (kind == 5) {
      l.kind = CacheKind::kSsm;
      l.kheads = static_cast<int>(c.Range(1, 2));
      l.heads = l.kheads * group;
      l.q_heads = l.heads * group;
      l.dk = static_cast<int>(c.Range(1, 8));
      l.dv = static_cast<int>(c.Range(1, 5));
      l.conv = static_cast<int>(c.Range(1, 4));
      layers.push_back(l);
      continue;
    }
    l.window = kind < 2 ? 0 : static_cast<int32_t>(c.Range(1, 8));
    if (kind >= 3) {
      l.kind = CacheKind::kRotating;
      l.capacity = l.window + static_cast<int32_t>(c.OneOf({0, 0, 1, 3}));
      if (!layers.empty() && c.Bool()) {
        for (const LayerConfig& other : layers) {
          if (other.kind == CacheKind::kRotating) {
            l.window = other.window;
            l.capacity = other.capacity;
          }
        }
      }
    }
    l.kv = DrawKvType(c, &l.dim);
    layers.push_back(l);
  }
  return layers;
}

KvType DrawKvType(Choices& c, int* dim) {
  if (!c.Chance(25)) return KvType::kF32;
  const KvType type = static_cast<KvType>(c.Range(1, 3));
  if (IsBlockType(type)) *dim = kKvBlockValues * static_cast<int>(c.Range(1, 2));
  return type;
}

std::string DrawKvKey(Choices& c, int* dim) {
  const KvType type = DrawKvType(c, dim);
  return type == KvType::kF32 ? "" : std::string(" kv=") + KvTypeName(type);
}

PaddedColumns DrawPaddedColumns(Choices& c, int32_t max_columns,
                                const std::vector<int32_t>& held, bool pads) {
  PaddedColumns p;
  p.columns = static_cast<int32_t>(c.Range(1, max_columns));
  for (size_t r = 0; r < held.size(); ++r) {
    const int32_t left = pads && held[r] == 0 ? static_cast<int32_t>(c.Range(0, p.columns)) : 0;
    const int32_t right = pads ? static_cast<int32_t>(c.Range(0, p.columns - left)) : 0;
    p.left.push_back(left);
    p.right.push_back(right);
  }
  return p;
}

}  // namespace kvspec::testing
