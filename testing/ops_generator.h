// Random trace programs over every operation, valid or refused, for
// differential runs against the model (fuzz_layout_ops): a header (1..4
// rows, 1..3 layers, kv or rotating, heads and dim 1..4, a window 1..8,
// optional for kv, a ring capacity up to window + 4; in about a third of
// the layouts one or more `ssm` layers, heads 1..2, kheads 1 or heads, dk,
// dv and conv 1..4, alone or mixed with attention layers) and up to 40
// statements (windows with left and right padding and ids, decodes, trims
// with and without bypass, speculative rounds with uniform and ragged
// accepts, fork, use, join, filter, extract, reload, expectations, and
// `expect error` around operations that should be refused, or sometimes
// not; with an ssm layer every trim is written inside `expect error`).
//
// A statement may also be a twin pattern (Twins): two forks reach the same
// tokens, one through a round that rejects a tail, the other writing only
// the kept tokens in other chunks or through a round with other drafts,
// then `expect equal`: bit-exact rollback replay and tail independence as
// invariants inside the trace. A small shadow of the state steers the
// choices towards valid operations; it decides nothing about the outcome.
#pragma once

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvspec/base/kv_type.h"
#include "kvspec/testing/choices.h"

namespace kvspec::testing {

class OpsGenerator {
 public:
  explicit OpsGenerator(Choices* choices) : c_(*choices) {}

  // The trace text: the header, then statements until 40 are written, the
  // choices run out or a refused operation outside `expect error` ends it.
  std::string Generate();

 private:
  static constexpr int kMaxStatements = 40;
  static constexpr int kMaxColumns = 8;  // L of a window
  // Columns all forwards together may write: the runner's cost grows with
  // the square of the columns a row holds, and small states find the bugs.
  static constexpr int kColumnBudget = 64;

  // What the generator believes about one layout: enough to pick mostly
  // valid arguments. Never consulted for the verdict.
  struct Shadow {
    std::vector<std::vector<int32_t>> ids;  // [row] ids of the real tokens, by position
    bool written = false;  // a forward ran
    bool batched = false;  // the caches are the batched kinds (docs/trace-runner.md, "Cache kinds")
    bool armed = false;
    bool verified = false;
    std::vector<int32_t> verify_real;
    bool after_window = false;  // the last change was a window
    std::vector<int32_t> window_real;
    // Columns per row now, at most ever, and before the last forward (ring
    // wrap: TRACE.md precise rule 1).
    int32_t columns = 0, peak = 0, peak_before = 0;
    // The last forward: each row's first query position and query count,
    // and the row's ids right after it.
    bool has_last = false;
    std::vector<int32_t> last_first, last_count;
    std::vector<std::vector<int32_t>> last_ids;

    int32_t Count(size_t r) const { return static_cast<int32_t>(ids[r].size()); }
    int32_t MinCount() const {
      int32_t m = INT32_MAX;
      for (size_t r = 0; r < ids.size(); ++r) m = std::min(m, Count(r));
      return m;
    }
    std::vector<int32_t> Positions() const {
      std::vector<int32_t> p;
      for (size_t r = 0; r < ids.size(); ++r) p.push_back(Count(r));
      return p;
    }
    void DropLast(size_t r, int32_t n) {
      ids[r].resize(ids[r].size() - static_cast<size_t>(std::min(n, Count(r))));
    }
  };

  struct LayerShape {
    std::string name;
    bool ring = false;  // `rotating`
    bool ssm = false;   // `ssm`; neither: `kv`
    int heads = 1, dim = 1, window = 0, capacity = 0;
    KvType kv = KvType::kF32;
  };

  Shadow& Cur() { return layouts_[current_]; }
  int Rows() { return static_cast<int>(Cur().ids.size()); }
  void Line(const std::string& s) {
    text_ += (wrap_next_ ? "expect error " : "") + s + "\n";
    wrap_next_ = false;
  }
  bool Chance(int percent) { return c_.Chance(percent); }
  int32_t Range(int32_t lo, int32_t hi) { return static_cast<int32_t>(c_.Range(lo, hi)); }
  // The shadow's peak after dropping tokens of the last forward.
  static void PeakAsIfNotWritten(Shadow* s) { s->peak = std::max(s->peak_before, s->columns); }

  // The header, the statement dispatch, the valid operations and the twin
  // pattern (ops_generator.cc).
  void Header();
  void SsmLayer(int l, LayerShape* shape);
  void OneStatement();
  bool Wrapped();
  std::string WindowText(int32_t L, std::vector<int32_t>* real, bool* any_ids,
                         std::vector<std::vector<int32_t>>* ids);
  void Forwarded(int32_t columns, const std::vector<int32_t>& real,
                 const std::vector<std::vector<int32_t>>& ids, bool decode);
  void Window();
  void Decode();
  void Trim();
  void Arm();
  void Accept();
  void Accepted(const std::vector<int32_t>& keep);
  void Forward(int32_t L, const std::vector<int32_t>& left, const std::vector<int32_t>& right,
               const std::vector<std::vector<int32_t>>& ids, bool decode);
  void Twins();
  void Batch();
  void Reload();
  void Fork();
  void Use();

  // Expectations and operations that should be refused (ops_expectations.cc).
  void ExpectPositions();
  void ExpectSees();
  void ExpectOther();
  std::string RefusedOperation();
  void ExpectError();
  void Refused();

  Choices& c_;
  std::string text_;
  int rows_ = 1;
  std::vector<LayerShape> layers_;
  std::vector<size_t> attention_;  // indices of the kv and rotating layers
  bool has_ssm_ = false;
  int twins_ = 0;                  // Twins() patterns written
  std::map<std::string, Shadow> layouts_;
  std::string current_;
  int forks_ = 0;
  int budget_ = kColumnBudget;
  bool wrap_next_ = false;  // the next line is an operation inside `expect error`
  bool stopped_ = false;
};

}  // namespace kvspec::testing
