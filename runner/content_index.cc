// Tags and the index that recovers them from stored bytes (runner/runner.h).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kvspec/kernels/quantize.h"
#include "kvspec/runner/runner.h"
#include "kvspec/trace/values.h"

namespace kvspec::trace {

bool Tag::operator<(const Tag& o) const {
  if (kind != o.kind) return kind < o.kind;  // tokens first, then pad, zero, junk
  return pos != o.pos ? pos < o.pos : id < o.id;
}

std::string Tag::ToString() const {
  switch (kind) {
    case kPad: return "pad";
    case kZero: return "zero";
    case kJunk: return "junk";
    case kToken: break;
  }
  return pos == id ? std::to_string(pos) : std::to_string(pos) + ":" + std::to_string(id);
}

void WordHasher::Value(uint32_t bits) {
  if (count_++ & 1) {
    Word(static_cast<uint64_t>(half_) | (static_cast<uint64_t>(bits) << 32));
  } else {
    half_ = bits;
  }
}

void WordHasher::Floats(const float* values, size_t count) {
  size_t i = 0;
  if ((count_ & 1) && count > 0) {
    uint32_t bits;
    std::memcpy(&bits, values, 4);
    Value(bits);
    i = 1;
  }
  const size_t first_pair = i;
  for (; i + 2 <= count; i += 2) {
    uint64_t w;
    std::memcpy(&w, values + i, 8);  // little endian: values[i] in the low half
    Word(w);
  }
  count_ += i - first_pair;
  if (i < count) {
    uint32_t bits;
    std::memcpy(&bits, values + i, 4);
    Value(bits);
  }
}

uint64_t WordHasher::value() const {
  uint64_t h = h_;
  if (count_ & 1) {
    h = (h ^ half_) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 32;
  }
  return Mix(h ^ count_);
}

uint64_t StateHash(const SsmCacheBase& cache, int row) {
  WordHasher h;
  const std::vector<float> conv = cache.ConvStateTraceOrder(row);  // TRACE.md order
  h.Floats(conv.data(), conv.size());
  const std::vector<float> recurrent = cache.RecurrentStateTraceOrder(row);  // TRACE.md order
  h.Floats(recurrent.data(), recurrent.size());
  return h.value();
}

namespace {

// The values a head row of `dim` floats reads back as once stored as `type`
// (written to out [dim]).
void RoundThrough(KvType type, const float* x, int dim, float* out) {
  std::vector<uint8_t> stored(KvRowBytes(type, dim));
  if (StoreKvRow(type, x, dim, stored.data()).ok()) {
    LoadKvRow(type, stored.data(), dim, out);
  } else {
    std::fill(out, out + dim, 0.0f);  // unreachable: the layout checked the dim
  }
}

// Whether the n floats at p all have the bit pattern `bits`.
bool AllBits(const float* p, size_t n, uint32_t bits) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, p + i, 4);
    if (b != bits) return false;
  }
  return true;
}

}  // namespace

uint64_t ContentIndex::HashKv(int layer, const float* k, const float* v, size_t count) {
  WordHasher h;
  h.Value(static_cast<uint32_t>(layer));
  h.Floats(k, count);
  h.Floats(v, count);
  return h.value();
}

void ContentIndex::Remember(int layer, int32_t id, int32_t pos, const float* k,
                            const float* v, size_t count, KvType type, int dim) {
  Tag t;
  t.kind = Tag::kToken;
  t.pos = pos;
  t.id = id;
  if (type == KvType::kF32) {
    tags_.emplace(HashKv(layer, k, v, count), t);
    return;
  }
  // What the cache stores and reads back: each head row rounded through the type.
  std::vector<float> rk(count), rv(count);
  for (size_t at = 0; at + static_cast<size_t>(dim) <= count; at += static_cast<size_t>(dim)) {
    RoundThrough(type, k + at, dim, &rk[at]);
    RoundThrough(type, v + at, dim, &rv[at]);
  }
  tags_.emplace(HashKv(layer, rk.data(), rv.data(), count), t);
}

Tag ContentIndex::Recover(int layer, const KvView& view, int row, int32_t slot) const {
  if (view.type() == KvType::kF32) return RecoverF32(layer, view, row, slot);
  const size_t dim = static_cast<size_t>(view.dim);
  const KvType type = view.type();
  const size_t row_bytes = view.RowBytes();
  // Every head's key, then every head's value, as the floats they read back
  // as (the order Remember hashed).
  std::vector<float> values(2 * static_cast<size_t>(view.kv_heads) * dim);
  bool zero = true;
  for (int h = 0; h < 2 * view.kv_heads; ++h) {
    const bool key = h < view.kv_heads;
    const int head = key ? h : h - view.kv_heads;
    const uint8_t* stored = key ? view.KeyBytes(row, head, slot) : view.ValueBytes(row, head, slot);
    for (size_t i = 0; i < row_bytes && zero; ++i) zero = stored[i] == 0;
    LoadKvRow(type, stored, view.dim, &values[static_cast<size_t>(h) * dim]);
  }
  Tag t;
  if (zero) {  // storage never written (all bytes zero)
    t.kind = Tag::kZero;
    return t;
  }
  std::vector<float> pads(dim, trace::PadValue()), pad(dim);
  RoundThrough(type, pads.data(), view.dim, pad.data());
  bool is_pad = true;
  for (size_t i = 0; i < values.size() && is_pad; ++i) {
    is_pad = std::memcmp(&values[i], &pad[i % dim], 4) == 0;
  }
  if (is_pad) {
    t.kind = Tag::kPad;
    return t;
  }
  WordHasher h;
  h.Value(static_cast<uint32_t>(layer));
  h.Floats(values.data(), values.size());
  auto it = tags_.find(h.value());
  if (it != tags_.end()) return it->second;
  t.kind = Tag::kJunk;
  return t;
}

// fp32 storage is read in place: no copy, no allocation (the runner recovers
// every admitted slot after every forward).
Tag ContentIndex::RecoverF32(int layer, const KvView& view, int row, int32_t slot) const {
  const size_t dim = static_cast<size_t>(view.dim);
  auto all_bits = [&](uint32_t bits) {
    for (int h = 0; h < view.kv_heads; ++h) {
      if (!AllBits(view.Key(row, h, slot), dim, bits) ||
          !AllBits(view.Value(row, h, slot), dim, bits)) {
        return false;
      }
    }
    return true;
  };
  uint32_t pad_bits;
  const float pad = trace::PadValue();
  std::memcpy(&pad_bits, &pad, 4);
  Tag t;
  if (all_bits(0)) {
    t.kind = Tag::kZero;
    return t;
  }
  if (all_bits(pad_bits)) {
    t.kind = Tag::kPad;
    return t;
  }
  // The same sequence of values Remember hashed: every head's key, then
  // every head's value.
  WordHasher h;
  h.Value(static_cast<uint32_t>(layer));
  for (int hd = 0; hd < view.kv_heads; ++hd) h.Floats(view.Key(row, hd, slot), dim);
  for (int hd = 0; hd < view.kv_heads; ++hd) h.Floats(view.Value(row, hd, slot), dim);
  auto it = tags_.find(h.value());
  if (it != tags_.end()) return it->second;
  t.kind = Tag::kJunk;
  return t;
}

std::vector<Tag> ContentIndex::Seen(int layer, const KvView& view, const Mask& mask, int row,
                                    int32_t query) const {
  std::vector<Tag> seen;
  for (int32_t slot = 0; slot < mask.slots; ++slot) {
    if (mask.Admits(row, query, slot)) seen.push_back(Recover(layer, view, row, slot));
  }
  std::sort(seen.begin(), seen.end());
  return seen;
}

void SlotTags::Seen(int row, int32_t query, std::vector<Tag>* seen) {
  auto& sorted = by_tag_[static_cast<size_t>(row)];
  if (sorted.empty()) {
    sorted.reserve(static_cast<size_t>(mask_.slots));
    const int32_t* pos = mask_.slot_pos + static_cast<size_t>(row) * mask_.slot_stride;
    for (int32_t slot = 0; slot < mask_.slots; ++slot) {
      // A slot without a position is admitted by no query.
      if (pos[slot] >= 0) sorted.emplace_back(index_.Recover(layer_, view_, row, slot), slot);
    }
    // By tag, equal tags in slot order (what a stable sort by tag of this
    // slot-ordered list gives, without its temporary buffer).
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
      if (a.first < b.first) return true;
      if (b.first < a.first) return false;
      return a.second < b.second;
    });
  }
  seen->clear();
  seen->reserve(sorted.size());  // one allocation: at most every slot is admitted
  for (const auto& [tag, slot] : sorted) {
    if (mask_.Admits(row, query, slot)) seen->push_back(tag);
  }
}

std::vector<Tag> SlotTags::Seen(int row, int32_t query) {
  std::vector<Tag> seen;
  Seen(row, query, &seen);
  return seen;
}

}  // namespace kvspec::trace
