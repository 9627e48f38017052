// Tags and the index that recovers them from stored bytes (trace/runner.h).
#include <cstring>
#include <string>
#include <vector>

#include "trace/runner.h"

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

uint64_t ContentIndex::HashKv(int layer, const float* k, const float* v, size_t count) {
  Hasher h;
  h.Value(layer);
  h.Bytes(k, count * sizeof(float));
  h.Bytes(v, count * sizeof(float));
  return h.value();
}

void ContentIndex::Remember(int layer, int32_t id, int32_t pos, const float* k,
                            const float* v, size_t count) {
  Tag t;
  t.kind = Tag::kToken;
  t.pos = pos;
  t.id = id;
  tags_.emplace(HashKv(layer, k, v, count), t);
}

Status ContentIndex::CheckInvariants() const {
  for (const auto& entry : tags_) {
    if (entry.second.kind != Tag::kToken) {
      return Status::Error("content index: a remembered tag is " + entry.second.ToString());
    }
  }
  return Status::Ok();
}

Tag ContentIndex::Recover(int layer, const KvView& view, int row, int32_t slot) const {
  const size_t dim = static_cast<size_t>(view.dim);
  const size_t count = dim * view.kv_heads;
  std::vector<float> k(count), v(count);
  for (int h = 0; h < view.kv_heads; ++h) {
    std::memcpy(&k[h * dim], view.Key(row, h, slot), dim * sizeof(float));
    std::memcpy(&v[h * dim], view.Value(row, h, slot), dim * sizeof(float));
  }
  Tag t;
  auto all_bits = [&](uint32_t bits) {
    for (size_t i = 0; i < count; ++i) {
      uint32_t a, b;
      std::memcpy(&a, &k[i], 4);
      std::memcpy(&b, &v[i], 4);
      if (a != bits || b != bits) return false;
    }
    return true;
  };
  uint32_t pad_bits;
  const float pad = trace::PadValue();
  std::memcpy(&pad_bits, &pad, 4);
  if (all_bits(0)) {
    t.kind = Tag::kZero;
  } else if (all_bits(pad_bits)) {
    t.kind = Tag::kPad;
  } else {
    auto it = tags_.find(HashKv(layer, k.data(), v.data(), count));
    if (it != tags_.end()) {
      t = it->second;
    } else {
      t.kind = Tag::kJunk;
    }
  }
  return t;
}

}  // namespace kvspec::trace
