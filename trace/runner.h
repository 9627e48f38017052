// Runs a parsed trace (../shared/TRACE.md) against the real core: layouts,
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
#include <vector>

#include "core/kv_cache.h"
#include "core/layout.h"
#include "core/status.h"
#include "trace/program.h"
#include "trace/values.h"

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

// The index that recovers tags from stored bytes (content_index.cc). The
// static members are the token contents of trace/values.h, kept here for
// the callers that draw contents through ContentIndex.
//
// Invariant: every remembered tag is a token (pad, zero and junk are what
// Recover reports for bytes that match no remembered token).
class ContentIndex {
 public:
  static void AttentionToken(int layer, int32_t id, int32_t pos, int heads,
                             int dim, float* q, float* k, float* v) {
    trace::AttentionToken(layer, id, pos, heads, dim, q, k, v);
  }
  static void RecurrentToken(int layer, int32_t id, int32_t pos, size_t channels,
                             size_t value_heads, float* x, float* gate, float* beta) {
    trace::RecurrentToken(layer, id, pos, channels, value_heads, x, gate, beta);
  }
  static std::vector<float> ConvWeights(int layer, size_t channels, size_t kernel) {
    return trace::ConvWeights(layer, channels, kernel);
  }
  static float PadValue() { return trace::PadValue(); }

  // Remembers that (layer, id, pos) was written with these k/v contents.
  void Remember(int layer, int32_t id, int32_t pos, const float* k,
                const float* v, size_t count);
  // What slot `slot` of row `row` holds in layer `layer`'s storage.
  Tag Recover(int layer, const KvView& view, int row, int32_t slot) const;

  Status CheckInvariants() const;

 private:
  static uint64_t HashKv(int layer, const float* k, const float* v, size_t count);
  std::unordered_map<uint64_t, Tag> tags_;
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
};

// Runs one parsed program. Normal output (sees/out/state lines, or the
// emitted trace) goes to `out`; errors and failed expectations to `err`.
// Returns the exit status: 0 all expectations met, 1 a refusal or a failed
// expectation, 2 a limit exceeded while running.
int RunProgram(const Program& program, const RunOptions& options,
               std::ostream& out, std::ostream& err);

// Reads, parses and runs one file ("-" for standard input). Exit status as
// above; 2 for an unreadable file or a syntax error.
int RunTraceFile(const std::string& path, const RunOptions& options,
                 std::ostream& out, std::ostream& err);

// Parses and runs `text` as if read from file `name`.
int RunTraceText(std::string_view text, std::string_view name,
                 const RunOptions& options, std::ostream& out, std::ostream& err);

}  // namespace kvspec::trace
