// Persistence: a versioned little-endian binary format with codecs keyed by
// cache kind, for single caches and whole layouts (ring phase, paddings,
// positions, wrap state, the pending-write bound of a bypass trim, round
// state and recurrent state all included). Decoding reads back exactly what
// was encoded: afterwards every operation behaves as on the original.
//
// Hostile input: every size is checked against the bytes actually left
// before anything is allocated, every decoded cache and layout must pass its
// CheckInvariants() (the invariants the code relies on, stated at the
// classes: slot ranges, ring phase, positions, lockstep of shared masks,
// round consistency), and any problem is a clear error naming the byte
// offset or the layer - never a crash, an overread or an allocation larger
// than a small multiple of the input.
//
// Allocation bound: the bytes live at once during one DecodeLayout or
// DecodeCache call are at most 8 x the input size + 64 KiB. Why: vectors
// read from the input take at most the bytes they consume; what a cache
// allocates before its vectors are read is checked against the bytes left
// (column stores: 12 bytes per row against 4 required; recurrent caches:
// their states, a scratch of at most 3 x the recurrent state since key
// heads divide value heads, 5 bytes per row, and one row buffer's copy while
// the states are put back in kernel order; round records' headers 24
// bytes per 8 required); the layer lists are reserved against 52 bytes per
// layer; the rest (strings of at most 256 bytes, messages) fits the slack.
// fuzz_codec_decode measures it with a counting operator new and traps
// above it.
//
// Format (version 2):
//   cache  := "KVSC" u32 version, string kind, payload of that kind
//   layout := "KVSL" u32 version, i32 rows, u32 layers,
//             { layer config, u64 length, cache }*, layout state
//   string := u32 length, bytes;  vectors := u64 count, elements
// An attention cache's payload and a layer config end their shape with the
// storage type (u8, KvType); keys and values are the stored rows' bytes
// (blocks as they are). Version 1 (fp32 only: no type, keys and values
// counted in floats) still loads; saving writes version 2.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "kvspec/core/cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/base/status.h"

namespace kvspec {

inline constexpr uint32_t kCodecVersion = 2;
inline constexpr uint32_t kOldestCodecVersion = 1;

// Whether a codec exists for this kind (compares kind strings; fails closed).
bool HasCodec(std::string_view kind);

Status EncodeCache(const Cache& cache, std::string* out);
Status DecodeCache(std::string_view bytes, std::unique_ptr<Cache>* out);

Status EncodeLayout(const Layout& layout, std::string* out);
Status DecodeLayout(std::string_view bytes, std::unique_ptr<Layout>* out);

}  // namespace kvspec
