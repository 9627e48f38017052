#include "fuzz/known_issues.h"

#include <cstdlib>
#include <map>

namespace kvspec::fuzz {

bool MayReachKnownIssue(const trace::Program& program, std::string* which) {
  static const bool no_skip = std::getenv("KVSPEC_FUZZ_NO_SKIP") != nullptr;
  if (no_skip) return false;

  // Issue 1: `trim` on a layout no forward ever wrote to. KvCacheBase::Drop
  // takes &slot_pos_[r * capacity_] of an empty vector (UBSan: reference
  // binding to null pointer, core/kv_cache.cc). Reproducer:
  // corpus/regressions/fuzz_trace_parse/kv_trim0_never_written.trace.
  // Tracked per layout name: a top-level forward writes (a refused one stops
  // the run); one inside `expect error` counts as not writing.
  std::map<std::string, bool> written{{"main", false}};
  std::string current = "main";
  for (const trace::Statement& st : program.body) {
    const bool nested = st.op == trace::Op::kExpectError && st.inner;
    const trace::Statement& op = nested ? *st.inner : st;
    switch (op.op) {
      case trace::Op::kWindow:
      case trace::Op::kDecode:
        if (!nested) written[current] = true;
        break;
      case trace::Op::kTrim:
        if (!written[current]) {
          *which = "trim on a layout never written (core/kv_cache.cc Drop)";
          return true;
        }
        break;
      case trace::Op::kFork:
      case trace::Op::kExtract:
        if (!written.count(op.name)) written[op.name] = written[current];
        break;
      case trace::Op::kUse:
        if (written.count(op.name)) current = op.name;
        break;
      default:
        break;
    }
  }
  return false;
}

}  // namespace kvspec::fuzz
