// Runs a parsed trace (docs/TRACE.md) against the real core: layouts,
// caches, masks and kernels, with token contents drawn as the "Values"
// section specifies.
//
// Visible sets are recovered from bytes: for every slot the layout's mask
// admits, the runner reads the key and value bytes stored there and looks
// them up among the contents written so far (ContentIndex). A stale,
// misplaced, zero or padding slot that is admitted shows up as what it
// holds (`pad`, `zero`, `junk`, or its real tag).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/base/status.h"
#include "kvspec/kernels/mask.h"
#include "kvspec/trace/program.h"
#include "kvspec/trace/values.h"

namespace kvspec::trace {

// What a stored slot holds, as recovered from its bytes.
struct Tag {
  enum Kind { kToken, kPad, kZero, kJunk };
  Kind kind = kToken;
  int32_t pos = 0;
  int32_t id = 0;
  bool operator==(const Tag& o) const {
    return kind == o.kind && (kind != kToken || (pos == o.pos && id == o.id));
  }
  bool operator<(const Tag& o) const;
  // "pos", "pos:id", "pad", "zero" or "junk"
  std::string ToString() const;
};

// The word hash of `state` lines and of the content index (docs/trace-runner.md, "Where
// TRACE.md leaves room"): the fp32 values fed, as one sequence, are taken
// two at a time as 64-bit words (the first value's bits in the low half; an
// odd last value zero-extended); h starts at 0xCBF29CE484222325 and per
// word becomes (h ^ w) * 0x9E3779B97F4A7C15, then h ^ (h >> 32); the hash
// is mix(h ^ n), n the count of values. A word at a time, not a byte: the
// read-back hashes every stored slot of every forward.
class WordHasher {
 public:
  void Floats(const float* values, size_t count);
  void Value(uint32_t bits);
  uint64_t value() const;

 private:
  void Word(uint64_t w) { h_ = (h_ ^ w) * 0x9E3779B97F4A7C15ull; h_ ^= h_ >> 32; }
  uint64_t h_ = 0xCBF29CE484222325ull;
  uint64_t count_ = 0;
  uint32_t half_ = 0;  // the pending low half when count_ is odd
};

// The word hash of row `row` of a recurrent cache: its conv state floats
// ([K-1][C], oldest first), then its recurrent state floats ([Hv][dv][dk]).
uint64_t StateHash(const SsmCacheBase& cache, int row);

// The index that recovers tags from stored bytes (content_index.cc). The
// static members are the token contents of trace/values.h, kept here for
// the callers that draw contents through ContentIndex.
//
// Invariant: every remembered tag is a token (pad, zero and junk are what
// Recover reports for bytes that match no remembered token).
class ContentIndex {
 public:
  static void AttentionToken(int layer, int32_t id, int32_t pos, int q_heads, int heads,
                             int dim, float* q, float* k, float* v) {
    trace::AttentionToken(layer, id, pos, q_heads, heads, dim, q, k, v);
  }
  static void RecurrentToken(int layer, int32_t id, int32_t pos, size_t channels,
                             size_t value_heads, float* x, float* gate, float* beta) {
    trace::RecurrentToken(layer, id, pos, channels, value_heads, x, gate, beta);
  }
  static std::vector<float> ConvWeights(int layer, size_t channels, size_t kernel) {
    return trace::ConvWeights(layer, channels, kernel);
  }
  static float PadValue() { return trace::PadValue(); }

  // Remembers that (layer, id, pos) was written with these k/v contents
  // (count floats: head rows of `dim`), as a cache storing `type` holds them.
  void Remember(int layer, int32_t id, int32_t pos, const float* k, const float* v,
                size_t count, KvType type, int dim);
  // What slot `slot` of row `row` holds in layer `layer`'s storage.
  Tag Recover(int layer, const KvView& view, int row, int32_t slot) const;
  // The tags one query (row, query column) saw, sorted: those of the slots
  // `mask` admits in `view` (one query; SlotTags reads back a forward).
  std::vector<Tag> Seen(int layer, const KvView& view, const Mask& mask, int row,
                        int32_t query) const;
  size_t size() const { return tags_.size(); }

 private:
  static uint64_t HashKv(int layer, const float* k, const float* v, size_t count);
  Tag RecoverF32(int layer, const KvView& view, int row, int32_t slot) const;
  std::unordered_map<uint64_t, Tag> tags_;
};

// The tags of one attention layer's slots after one forward, each slot
// recovered once (the first time a query of its row asks), so that reading
// back every query is linear in the bytes stored, not in queries x bytes.
// Holds pointers into `index`, `view` and `mask`: use it before they change.
class SlotTags {
 public:
  // Per row: (tag, slot) of every slot holding a position, sorted by tag.
  using Rows = std::vector<std::vector<std::pair<Tag, int32_t>>>;
  // `storage`, when given, holds the rows instead of this object: its
  // vectors are cleared and their allocations reused (the runner keeps one
  // for all its forwards). It must outlive this object.
  SlotTags(const ContentIndex& index, int layer, const KvView& view, const Mask& mask,
           Rows* storage = nullptr)
      : index_(index), layer_(layer), view_(view), mask_(mask),
        by_tag_(storage ? *storage : own_) {
    for (auto& row : by_tag_) row.clear();
    by_tag_.resize(static_cast<size_t>(mask.rows));
  }
  SlotTags(const SlotTags&) = delete;
  SlotTags& operator=(const SlotTags&) = delete;
  // The sorted tags of the slots the mask admits for (row, query).
  std::vector<Tag> Seen(int row, int32_t query);
  // The same into *seen (cleared first; its storage is reused).
  void Seen(int row, int32_t query, std::vector<Tag>* seen);

 private:
  const ContentIndex& index_;
  int layer_;
  KvView view_;
  const Mask& mask_;
  Rows own_;
  // Per row, once asked (empty before): own_ or the caller's storage.
  Rows& by_tag_;
};

struct RunOptions {
  bool values = false;  // print `out` lines
  bool emit = false;    // print the trace back with expectations filled in
  // When set, every `reload` also writes the encoded layout to
  // DIR/<file name>.<line>.kvsl (seed corpora for the codec fuzzers).
  std::string save_reloads_dir;
  // Run the scalar reference kernels instead of the Highway ones.
  bool reference_kernels = false;
  // Storage budget over all layouts; a trace needing more is stopped like
  // a limit violation (exit 2).
  size_t max_bytes = size_t{4} << 30;
  // Work budget over one trace, in operations: multiply-adds of the
  // attention reads and recurrent steps, bytes read back, and 64 per tag a
  // `sees` line reports (runner_budget.cc). A trace needing more stops with
  // exit 2; the default keeps any trace to seconds on one core.
  uint64_t max_work = uint64_t{40} << 30;
};

// Runs one parsed program. Normal output (sees/out/state lines, or the
// emitted trace) goes to `out`; errors and failed expectations to `err`.
// Returns the exit status: 0 all expectations met, 1 a refusal or a failed
// expectation, 2 a limit exceeded while running.
int RunProgram(const Program& program, const RunOptions& options,
               std::ostream& out, std::ostream& err);

// The name a trace read from `path` goes by in messages: the path, or
// `<stdin>` for "-".
inline std::string_view TraceSourceName(const std::string& path) {
  return path == "-" ? std::string_view("<stdin>") : std::string_view(path);
}

// Reads the trace file `path`, or standard input for "-", into *text,
// holding at most kMaxTraceBytes (trace/program.h) and one 64 KiB chunk
// whatever the input's length. Returns 0; or 2, with *text empty and
// `NAME:1:1: ...` on `err` (NAME: TraceSourceName(path)), for a directory,
// a file that cannot be opened or read, or more than kMaxTraceBytes.
int ReadTraceSource(const std::string& path, std::string* text, std::ostream& err);

// Reads (ReadTraceSource), parses and runs one file ("-" for standard
// input). Exit status as above; 2 for an unreadable file or a syntax error.
int RunTraceFile(const std::string& path, const RunOptions& options,
                 std::ostream& out, std::ostream& err);

// Parses and runs `text` as if read from file `name`.
int RunTraceText(std::string_view text, std::string_view name,
                 const RunOptions& options, std::ostream& out, std::ostream& err);

}  // namespace kvspec::trace
