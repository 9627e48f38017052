// Core bugs the fuzzers found that are not fixed yet. A program that can
// reach one is skipped (not run), so fuzzing goes on finding other things.
// When the core is fixed, delete the issue here: its regression input under
// corpus/regressions/ then replays for real. KVSPEC_FUZZ_NO_SKIP=1 turns the
// skipping off, to reproduce an issue with a fuzz or replay binary.
#pragma once

#include <cstddef>
#include <string>

#include "kvspec/trace/program.h"

namespace kvspec::fuzz {

// True when running `program` may reach a known core bug (conservatively:
// it may also say so for a program that would not); *which names it.
// Always false when KVSPEC_FUZZ_NO_SKIP is set.
bool MayReachKnownIssue(const trace::Program& program, std::string* which);

}  // namespace kvspec::fuzz
