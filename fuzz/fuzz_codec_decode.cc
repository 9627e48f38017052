// Fuzz target of the persistence decoders: arbitrary bytes to DecodeLayout
// and DecodeCache (the first byte picks which). Hostile input must be
// refused with a message, never crash, overread or allocate more than a
// small multiple of its size (ASan's allocation limit enforces it under
// libFuzzer). What decodes must be canonical: encoding it again gives the
// same bytes (an input of the older version 1 gives version 2 bytes that
// decode to the same state and encode to themselves). A decoded layout must then be usable: its state hash is stable
// under a copy, and a decode forward and a trim either run (the invariants
// hold, the forward advances every row by one) or are refused with a
// message and leave the state hash unchanged.
//
// Allocation bound, measured: a counting operator new records the peak of
// the bytes live during each DecodeLayout / DecodeCache call, and the
// target traps when it exceeds kAllocationFactor times the input size plus
// kAllocationSlack (the codec's stated bound, core/codec/codec.h).
#include <algorithm>
#include <malloc.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "kvspec/core/codec/codec.h"
#include "kvspec/core/layout.h"

namespace {

// The codec's allocation bound (core/codec/codec.h): what one decode may
// have live at once, against the input size.
constexpr size_t kAllocationFactor = 8;
constexpr size_t kAllocationSlack = size_t{1} << 16;

// Live and peak bytes allocated through operator new while `counting`.
struct AllocationCounter {
  bool counting = false;
  size_t live = 0;
  size_t peak = 0;
};
AllocationCounter g_allocations;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_codec_decode: %s\n", what);
    __builtin_trap();
  }
}

// An operation on a decoded layout either runs, leaving its invariants
// holding, or is refused with a message and changes nothing.
void CheckRefusalOrInvariants(const kvspec::Layout& layout, const kvspec::Status& s,
                              uint64_t hash_before) {
  if (s.ok()) {
    Check(layout.CheckInvariants().ok(), "an operation broke the layout's invariants");
    return;
  }
  Check(!s.message().empty(), "a refused operation without a message");
  Check(layout.StateHash() == hash_before, "a refused operation changed the state");
}

// One decode step on every layer (its Status checked), then a trim.
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
  const uint64_t before = layout.StateHash();
  const std::vector<int32_t> positions = layout.positions();
  const kvspec::Status s =
      layout.Forward(kvspec::ForwardColumns::Dense(rows, 1, /*decode=*/true), io);
  CheckRefusalOrInvariants(layout, s, before);
  if (s.ok()) {
    // A decode step of one column: every row one token further.
    const std::vector<int32_t> after = layout.positions();
    for (size_t r = 0; r < after.size(); ++r) {
      Check(after[r] == positions[r] + 1, "a decode forward did not advance a row by one");
    }
  }
  // Then a trim of that token (refused on recurrent or wrapped layers).
  const uint64_t before_trim = layout.StateHash();
  CheckRefusalOrInvariants(layout, layout.Trim(1, /*bypass=*/false), before_trim);
}

// Runs `decode` with the counter on; returns the peak live bytes.
template <class F>
size_t PeakAllocation(F decode) {
  g_allocations = AllocationCounter{true, 0, 0};
  decode();
  g_allocations.counting = false;
  return g_allocations.peak;
}

void CheckAllocation(size_t peak, size_t input_size) {
  if (std::getenv("KVSPEC_ALLOC_REPORT")) std::fprintf(stderr, "alloc %zu %zu\n", input_size, peak);
  if (peak > kAllocationFactor * input_size + kAllocationSlack) {
    std::fprintf(stderr, "fuzz_codec_decode: decoding %zu bytes had %zu bytes live at once\n",
                 input_size, peak);
    __builtin_trap();
  }
}

}  // namespace

// Counting allocation functions. A block's size is what malloc_usable_size
// reports, at new and at delete alike (the header-free way to know what
// delete frees; ASan intercepts it too). Every form of operator new and
// delete goes through them (testing/replace_new.h): the nothrow forms, left
// to ASan, allocated libFuzzer's seed inputs whose blocks then reached the
// free() below (alloc-dealloc-mismatch on every seed corpus), and the
// caches' storage (kernels/aligned_vector.h) takes the aligned forms, which
// the bound must count too.
namespace {

void* ReplacedAllocate(size_t size, size_t align) {
  void* p = nullptr;
  if (align == 0) {
    p = std::malloc(size == 0 ? 1 : size);
  } else if (posix_memalign(&p, std::max(align, sizeof(void*)), size == 0 ? 1 : size) != 0) {
    p = nullptr;
  }
  if (p == nullptr) throw std::bad_alloc();
  if (g_allocations.counting) {
    g_allocations.live += malloc_usable_size(p);
    g_allocations.peak = std::max(g_allocations.peak, g_allocations.live);
  }
  return p;
}
void ReplacedRelease(void* p, size_t) noexcept {
  if (p == nullptr) return;
  if (g_allocations.counting) {
    g_allocations.live -= std::min(malloc_usable_size(p), g_allocations.live);
  }
  std::free(p);
}

// Whether the encoding (magic, then u32 version) is of the version saving writes.
bool CurrentVersion(std::string_view bytes) {
  uint32_t version = 0;
  if (bytes.size() >= 8) std::memcpy(&version, bytes.data() + 4, sizeof(version));
  return version == kvspec::kCodecVersion;
}

}  // namespace

#include "kvspec/testing/replace_new.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string again;
  if (data[0] & 1) {
    std::unique_ptr<kvspec::Cache> cache;
    kvspec::Status s;
    CheckAllocation(PeakAllocation([&] { s = kvspec::DecodeCache(bytes, &cache); }), size);
    if (!s.ok()) {
      Check(!s.message().empty(), "a refusal without a message");
      return 0;
    }
    Check(kvspec::EncodeCache(*cache, &again).ok(), "a decoded cache does not encode");
    if (CurrentVersion(bytes)) {
      Check(again == bytes, "decode then encode changed the bytes");
    } else {
      std::unique_ptr<kvspec::Cache> upgraded;
      std::string third;
      Check(kvspec::DecodeCache(again, &upgraded).ok(), "an upgraded cache does not decode");
      Check(kvspec::EncodeCache(*upgraded, &third).ok() && third == again,
            "an upgraded cache is not canonical");
    }
    return 0;
  }
  std::unique_ptr<kvspec::Layout> layout;
  kvspec::Status s;
  CheckAllocation(PeakAllocation([&] { s = kvspec::DecodeLayout(bytes, &layout); }), size);
  if (!s.ok()) {
    Check(!s.message().empty(), "a refusal without a message");
    return 0;
  }
  Check(kvspec::EncodeLayout(*layout, &again).ok(), "a decoded layout does not encode");
  if (CurrentVersion(bytes)) {
    Check(again == bytes, "decode then encode changed the bytes");
  } else {
    std::unique_ptr<kvspec::Layout> upgraded;
    std::string third;
    Check(kvspec::DecodeLayout(again, &upgraded).ok(), "an upgraded layout does not decode");
    Check(upgraded->StateHash() == layout->StateHash(), "an upgraded layout hashes differently");
    Check(kvspec::EncodeLayout(*upgraded, &third).ok() && third == again,
          "an upgraded layout is not canonical");
  }
  Check(layout->Copy()->StateHash() == layout->StateHash(), "a copy hashes differently");
  if (size < 4096) Exercise(*layout);
  return 0;
}
