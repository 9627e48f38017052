#include "fuzz/known_issues.h"

#include <cstdlib>

namespace kvspec::fuzz {

// No known core bug is open. Fixed, with their regression inputs replayed
// by ctest:
// - `trim` on a layout no forward ever wrote to bound a reference to an
//   empty vector (UBSan): corpus/regressions/fuzz_trace_parse/
//   kv_trim0_never_written.trace.
// - `reload` kept the bypass-trim allowance, against TRACE.md precise rule 3:
//   corpus/regressions/fuzz_trace_parse/reload_then_trim_bypass.trace.
// A newly found bug that cannot be fixed at once goes here, with a
// conservative test on the program, until it is fixed.
// - An extracted layout ran the Highway kernels under --reference:
//   corpus/regressions/fuzz_trace_parse/reference_kernels_after_extract.trace.
bool MayReachKnownIssue(const trace::Program& program, std::string* which) {
  static const bool no_skip = std::getenv("KVSPEC_FUZZ_NO_SKIP") != nullptr;
  (void)program;
  (void)which;
  (void)no_skip;
  return false;
}

}  // namespace kvspec::fuzz
