// Fuzz target of the persistence decoders: arbitrary bytes to DecodeLayout
// and DecodeCache (the first byte picks which). Hostile input must be
// refused with a message, never crash, overread or allocate more than a
// small multiple of its size (ASan's allocation limit enforces it under
// libFuzzer). What decodes must be canonical: encoding it again gives the
// same bytes. A decoded layout must then be usable: a decode forward either
// runs or is refused, and its state hash is stable under a copy.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/codec/codec.h"
#include "core/layout.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_codec_decode: %s\n", what);
    __builtin_trap();
  }
}

// One decode step on every layer, with zeros as contents.
void Exercise(kvspec::Layout& layout) {
  const int rows = layout.rows();
  std::vector<std::vector<float>> buffers;
  std::vector<kvspec::AttentionIO> io(layout.size());
  std::vector<std::vector<float>> weights(layout.size());
  for (size_t l = 0; l < layout.size(); ++l) {
    const kvspec::LayerConfig& c = layout.config(l);
    if (const kvspec::SsmCacheBase* ssm = layout.recurrent(l)) {
      const kvspec::SsmShape& s = ssm->shape();
      // Shapes come from the input: keep the work bounded.
      if (s.Channels() * static_cast<size_t>(s.conv) > (1u << 20) ||
          s.RecurrentFloats() > (1u << 22)) {
        return;
      }
      weights[l].assign(s.Channels() * s.conv, 0.25f);
      buffers.emplace_back(rows * s.Channels(), 0.5f);
      const float* x = buffers.back().data();
      buffers.emplace_back(rows * s.GateFloats(), 0.5f);
      const float* g = buffers.back().data();
      buffers.emplace_back(rows * static_cast<size_t>(s.value_heads), 0.5f);
      kvspec::SsmIO sio;
      sio.conv_weights = weights[l].data();
      sio.x = x;
      sio.gate = g;
      sio.beta = buffers.back().data();
      io[l] = kvspec::AttentionIO(sio);
      continue;
    }
    const size_t n = static_cast<size_t>(rows) * c.QueryHeads() * c.dim;
    if (n > (1u << 20) || layout.attention(l)->View().slots > (1 << 16)) return;
    buffers.emplace_back(n, 0.5f);
    const float* q = buffers.back().data();
    buffers.emplace_back(n, 0.25f);
    float* out = buffers.back().data();
    io[l] = kvspec::AttentionIO(q, q, q, out);
  }
  (void)layout.Forward(kvspec::ForwardColumns::Dense(rows, 1, /*decode=*/true), io);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string again;
  if (data[0] & 1) {
    std::unique_ptr<kvspec::Cache> cache;
    const kvspec::Status s = kvspec::DecodeCache(bytes, &cache);
    if (!s.ok()) {
      Check(!s.message().empty(), "a refusal without a message");
      return 0;
    }
    Check(kvspec::EncodeCache(*cache, &again).ok(), "a decoded cache does not encode");
    Check(again == bytes, "decode then encode changed the bytes");
    return 0;
  }
  std::unique_ptr<kvspec::Layout> layout;
  const kvspec::Status s = kvspec::DecodeLayout(bytes, &layout);
  if (!s.ok()) {
    Check(!s.message().empty(), "a refusal without a message");
    return 0;
  }
  Check(kvspec::EncodeLayout(*layout, &again).ok(), "a decoded layout does not encode");
  Check(again == bytes, "decode then encode changed the bytes");
  Check(layout->Copy()->StateHash() == layout->StateHash(), "a copy hashes differently");
  if (size < 4096) Exercise(*layout);
  return 0;
}
