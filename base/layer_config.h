// The shape of one layer of a layout: what a trace's `layer` line declares
// and what Layout::Create builds a cache from. One struct for every kind;
// each kind reads its own fields.
#pragma once

#include <cstdint>
#include <string>

#include "kvspec/base/kind.h"
#include "kvspec/base/kv_type.h"

namespace kvspec {

struct LayerConfig {
  std::string name;
  CacheKind kind = CacheKind::kKv;
  // Attention layers (kv, rotating).
  int heads = 1;            // KV heads; ssm: value heads
  int q_heads = 0;          // query heads, a multiple of heads; 0: = heads
  int dim = 4;
  int32_t window = 0;       // 0: none (a kv layer sees everything)
  int32_t capacity = 0;     // rotating: ring capacity (>= window); 0: = window
  KvType kv = KvType::kF32; // storage type of keys and values
  // Recurrent layers (ssm).
  int kheads = 0;           // key heads, divides heads; 0: = heads
  int dk = 4;
  int dv = 4;
  int conv = 4;             // conv kernel size, 1..64

  int QueryHeads() const { return q_heads ? q_heads : heads; }
  int KeyHeads() const { return kheads ? kheads : heads; }
  int32_t RingCapacity() const { return capacity ? capacity : window; }
  // Pre-conv channels of a recurrent layer: q and k parts, then v.
  size_t SsmChannels() const {
    return 2 * static_cast<size_t>(KeyHeads()) * dk + static_cast<size_t>(heads) * dv;
  }
};

}  // namespace kvspec
