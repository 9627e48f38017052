// Core bugs the fuzzers found that are not fixed yet. A program that can
// reach one is skipped (not run), so fuzzing goes on finding other things.
// When the core is fixed, delete the issue here: its regression input under
// corpus/regressions/ then replays for real. KVSPEC_FUZZ_NO_SKIP=1 turns the
// skipping off, to reproduce an issue with a fuzz or replay binary.
#pragma once

#include <cstddef>
#include <string>

#include "trace/program.h"

namespace kvspec::fuzz {

// True when running `program` may reach a known core bug (conservatively:
// it may also say so for a program that would not); *which names it.
// Always false when KVSPEC_FUZZ_NO_SKIP is set.
bool MayReachKnownIssue(const trace::Program& program, std::string* which);

// Issue 16 (open): the runner does not yet bound everything a near-limit
// program makes it allocate or compute under a storage budget of
// `max_bytes`. True when `program` may meet one of those cases (see
// known_issues.cc); *which names it. Used by fuzz_limits only; delete it
// (and its one call in fuzz/fuzz_limits.cc) when the runner bounds them.
// Always false when KVSPEC_FUZZ_NO_SKIP is set.
bool MayOutrunRunnerBounds(const trace::Program& program, size_t max_bytes, std::string* which);

}  // namespace kvspec::fuzz
