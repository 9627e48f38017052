// Round-trip fuzz target of the persistence codecs: the input's bytes pick
// a hybrid layout (kv, windowed kv, ring, recurrent layers; 1-4 rows; every
// storage type) and a sequence of operations (windows with left and
// prepared padding, decodes, trims, rounds with ragged accepts, filter,
// join with a copy, extract);
// at every step the layout is saved and loaded back, and the loaded one
// must hash exactly like the original, encode to the same bytes, and behave
// alike on the next operation (same status, same state hash after it).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kvspec/core/codec/codec.h"
#include "kvspec/core/layout.h"
#include "kvspec/runner/runner.h"
#include "kvspec/testing/fdp_choices.h"
#include "kvspec/testing/shape_generators.h"

namespace {

using kvspec::AttentionIO;
using kvspec::ForwardColumns;
using kvspec::Layout;
using kvspec::LayerConfig;
using kvspec::CacheKind;
using kvspec::Status;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_codec_roundtrip: %s\n", what);
    __builtin_trap();
  }
}

size_t Channels(const LayerConfig& c) {
  return 2 * static_cast<size_t>(c.kheads ? c.kheads : c.heads) * c.dk +
         static_cast<size_t>(c.heads) * c.dv;
}

// A forward with TRACE.md contents (ids = positions + salt).
Status Forward(Layout& layout, const ForwardColumns& cols, int salt) {
  const int rows = layout.rows();
  const size_t L = static_cast<size_t>(cols.columns);
  const std::vector<int32_t> next = layout.positions();
  std::vector<std::vector<float>> a(layout.size()), b(layout.size()), c(layout.size()),
      w(layout.size()), o(layout.size());
  std::vector<AttentionIO> io(layout.size());
  for (size_t l = 0; l < layout.size(); ++l) {
    const LayerConfig& cfg = layout.config(l);
    const bool ssm = cfg.kind == CacheKind::kSsm;
    // Attention: a = q [q_heads * dim], b = k and c = v [heads * dim] per column.
    // Recurrent: a = x [C], b = gate and c = beta [heads] per column.
    const size_t C = ssm ? Channels(cfg) : static_cast<size_t>(cfg.QueryHeads()) * cfg.dim;
    const size_t g = ssm ? static_cast<size_t>(cfg.heads) : static_cast<size_t>(cfg.heads) * cfg.dim;
    a[l].assign(rows * L * C, kvspec::trace::ContentIndex::PadValue());
    b[l].assign(rows * L * g, kvspec::trace::ContentIndex::PadValue());
    c[l].assign(rows * L * g, kvspec::trace::ContentIndex::PadValue());
    o[l].assign(rows * L * (ssm ? static_cast<size_t>(cfg.heads) * cfg.dv : C), 0.0f);
    for (int r = 0; r < rows; ++r) {
      for (int32_t j = 0; j < cols.Real(r); ++j) {
        const size_t at = r * L + static_cast<size_t>(cols.left[r] + j);
        const int32_t pos = next[r] + j;
        if (ssm) {
          kvspec::trace::ContentIndex::RecurrentToken(static_cast<int>(l), pos + salt, pos, C,
                                                      g, &a[l][at * C], &b[l][at * g],
                                                      &c[l][at * g]);
        } else {
          kvspec::trace::ContentIndex::AttentionToken(static_cast<int>(l), pos + salt, pos,
                                                      cfg.QueryHeads(), cfg.heads, cfg.dim,
                                                      &a[l][at * C], &b[l][at * g],
                                                      &c[l][at * g]);
        }
      }
    }
    if (ssm) {
      w[l] = kvspec::trace::ContentIndex::ConvWeights(static_cast<int>(l), C, cfg.conv);
      kvspec::SsmIO sio;
      sio.conv_weights = w[l].data();
      sio.x = a[l].data();
      sio.gate = b[l].data();
      sio.beta = c[l].data();
      sio.y = o[l].data();
      io[l] = AttentionIO(sio);
    } else {
      io[l] = AttentionIO(a[l].data(), b[l].data(), c[l].data(), o[l].data());
    }
  }
  return layout.Forward(cols, io);
}

// `hash` is layout.StateHash(), which the caller has (hashing is a large
// part of each step).
std::unique_ptr<Layout> Reload(const Layout& layout, uint64_t hash) {
  std::string bytes, again;
  Check(kvspec::EncodeLayout(layout, &bytes).ok(), "encode refused a valid layout");
  std::unique_ptr<Layout> loaded;
  const Status s = kvspec::DecodeLayout(bytes, &loaded);
  if (!s.ok()) {
    std::fprintf(stderr, "decode: %s\n", s.message().c_str());
    Check(false, "decode refused what encode wrote");
  }
  Check(loaded->StateHash() == hash, "the reloaded layout hashes differently");
  Check(kvspec::EncodeLayout(*loaded, &again).ok() && again == bytes,
        "the reloaded layout encodes differently");
  return loaded;
}

// Applies one operation chosen by `op` to `layout`; returns its status.
Status Apply(Layout& layout, int op, FuzzedDataProvider& in, int salt) {
  const int rows = layout.rows();
  const std::vector<int32_t> next = layout.positions();
  switch (op) {
    case 0:
    case 1: {
      kvspec::testing::FdpChoices choices(&in);
      const kvspec::testing::PaddedColumns pads =
          kvspec::testing::DrawPaddedColumns(choices, 6, next, true);
      ForwardColumns cols = ForwardColumns::Dense(rows, pads.columns);
      cols.left = pads.left;
      cols.right = pads.right;
      return Forward(layout, cols, salt);
    }
    case 2:
      return Forward(layout, ForwardColumns::Dense(rows, 1, true), salt);
    case 3:
      return layout.Trim(in.ConsumeIntegralInRange<int32_t>(0, 3), in.ConsumeBool());
    case 4:
      return layout.Arm();
    case 5: {
      std::vector<int32_t> keep;
      const bool per_row = in.ConsumeBool();
      for (int r = 0; r < (per_row ? rows : 1); ++r) {
        keep.push_back(in.ConsumeIntegralInRange<int32_t>(0, 6));
      }
      return layout.Accept(keep);
    }
    case 6: {
      std::vector<int32_t> keep;
      for (int r = 0; r < rows; ++r) {
        if (in.ConsumeBool()) keep.push_back(r);
      }
      return layout.Filter(keep);
    }
    case 7: {
      if (rows > 8) return Status::Error("too many rows for this target");
      std::unique_ptr<Layout> copy = layout.Copy();
      return layout.Join(*copy);
    }
    default: {
      std::unique_ptr<Layout> one;
      Status s = layout.Extract(in.ConsumeIntegralInRange<int32_t>(0, rows), &one);
      if (s.ok()) {
        // Continue with the extracted row as the layout.
        const uint64_t hash = one->StateHash();
        std::unique_ptr<Layout> reloaded = Reload(*one, hash);
        Check(reloaded->StateHash() == hash, "extract reload");
      }
      return s;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  std::vector<LayerConfig> layers;
  const int n = in.ConsumeIntegralInRange(1, 3);
  for (int i = 0; i < n; ++i) {
    LayerConfig c;
    c.name = "l" + std::to_string(i);
    c.heads = in.ConsumeIntegralInRange(1, 2);
    c.dim = in.ConsumeIntegralInRange(1, 5);
    switch (in.ConsumeIntegralInRange(0, 3)) {
      case 1:
        c.window = in.ConsumeIntegralInRange<int32_t>(1, 5);
        break;
      case 2:
        c.kind = CacheKind::kRotating;
        c.window = in.ConsumeIntegralInRange<int32_t>(1, 5);
        c.capacity = c.window + in.ConsumeIntegralInRange<int32_t>(0, 3);
        break;
      case 3:
        c.kind = CacheKind::kSsm;
        c.kheads = 1;
        c.dk = in.ConsumeIntegralInRange(1, 4);
        c.dv = in.ConsumeIntegralInRange(1, 4);
        c.conv = in.ConsumeIntegralInRange(1, 4);
        break;
      default:
        break;
    }
    if (c.kind != CacheKind::kSsm) {
      kvspec::testing::FdpChoices choices(&in);
      c.kv = kvspec::testing::DrawKvType(choices, &c.dim);
    }
    layers.push_back(c);
  }
  std::unique_ptr<Layout> layout;
  if (!Layout::Create(in.ConsumeIntegralInRange(1, 4), layers, &layout).ok()) return 0;
  uint64_t hash = layout->StateHash();  // of *layout, kept up to date
  for (int step = 0; step < 24 && in.remaining_bytes() > 0; ++step) {
    std::unique_ptr<Layout> loaded = Reload(*layout, hash);
    const int op = in.ConsumeIntegralInRange(0, 8);
    // Both take the same operation with the same choices.
    const std::string choices = in.ConsumeBytesAsString(in.ConsumeIntegralInRange<size_t>(0, 16));
    FuzzedDataProvider a(reinterpret_cast<const uint8_t*>(choices.data()), choices.size());
    FuzzedDataProvider b(reinterpret_cast<const uint8_t*>(choices.data()), choices.size());
    const Status sa = Apply(*layout, op, a, step);
    const Status sb = Apply(*loaded, op, b, step);
    Check(sa.ok() == sb.ok(), "the reloaded layout refused differently");
    hash = layout->StateHash();
    Check(hash == loaded->StateHash(), "the reloaded layout diverged");
    if (layout->rows() > 16) return 0;
  }
  return 0;
}
