// CacheCodec: the friend of the caches and the layout that reads and writes
// their state (core/codec/codec.h has the format). Decoding reads what the
// bytes hold, bounded by the input, and then refuses any state that fails
// the object's CheckInvariants(): the invariants are stated once, at the
// classes, not again here.
#pragma once

#include <cstdint>
#include <string>
#include <limits>
#include <memory>
#include <vector>

#include "kvspec/core/cache.h"
#include "kvspec/core/codec/byte_io.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/base/status.h"
#include "kvspec/kernels/conv1d.h"

namespace kvspec {

// DecodeSsm relies on it: the floats of a recurrent state of the largest
// shape the reader accepts (rows x 2 buffers x (conv states + recurrent
// state)) are far below the int64 range, so its products never overflow.
static_assert(codec_internal::kMaxRowsRead * 2 *
                      (codec_internal::kMaxHeadsRead * codec_internal::kMaxDimRead *
                           codec_internal::kMaxDimRead +
                       3 * (static_cast<int64_t>(kMaxConvKernel) - 1) *
                           codec_internal::kMaxHeadsRead * codec_internal::kMaxDimRead) <
                  std::numeric_limits<int64_t>::max() / 2,
              "a recurrent state within the read bounds must not overflow int64");

class CacheCodec {
 public:
  using Reader = codec_internal::Reader;
  using Writer = codec_internal::Writer;

  // Column caches (kv, rotating and their batched kinds): column_codec.cc.
  static void EncodeColumns(const ColumnStore& c, Writer& w);
  static Status DecodeColumns(Reader& r, bool batched, bool ring, std::unique_ptr<Cache>* out);

  // Recurrent caches (ssm, batched_ssm): ssm_codec.cc.
  static void EncodeSsm(const SsmCacheBase& c, Writer& w);
  static Status DecodeSsm(Reader& r, bool batched, std::unique_ptr<Cache>* out);

  // Any cache with its magic, version and kind, the reader left after it:
  // codec.cc.
  static Status DecodeCacheFrom(Reader& r, std::unique_ptr<Cache>* out);
  // What EncodeCache writes, appended to *bytes (EncodeLayout writes each
  // layer's cache in place, not through a string of its own): codec.cc.
  // On a refusal *bytes may hold part of it.
  static Status EncodeCacheTo(const Cache& cache, std::string* bytes);

  // Layouts: layout_codec.cc.
  static void EncodeLayoutState(const Layout& l, Writer& w);
  static const std::vector<LayerConfig>& Configs(const Layout& l) { return l.configs_; }
  // The layout of `configs` over the decoded `caches`, its state read from r.
  static Status DecodeLayoutState(Reader& r, int rows, std::vector<LayerConfig> configs,
                                  std::vector<std::unique_ptr<Cache>> caches,
                                  std::unique_ptr<Layout>* out);

};

}  // namespace kvspec
