// Invariant checks as a bug detector. Each class that holds state (the
// column store, the recurrent caches, the layout) states its invariants in
// the comment at the class and checks them in `Status CheckInvariants()
// const`, defined in the class's own .cc; the codec refuses a decoded state
// that fails them. Debug builds (no NDEBUG) and builds with
// -DKVSPEC_CHECK_INVARIANTS=ON (the asan and fuzz presets) also check them
// after every operation that changes a cache or a layout, and abort naming
// the operation and the broken invariant: a state that fails them is a bug
// in core/, not a user error.
#pragma once

#include <new>
#include <stdexcept>
#include <string>

#include "kvspec/base/status.h"

#if !defined(NDEBUG) || (defined(KVSPEC_CHECK_INVARIANTS) && KVSPEC_CHECK_INVARIANTS)
#define KVSPEC_INVARIANTS_CHECKED 1
#else
#define KVSPEC_INVARIANTS_CHECKED 0
#endif

namespace kvspec {

// Prints "kvspec: invariant broken after OPERATION (FILE:LINE): MESSAGE" to
// stderr and aborts.
[[noreturn]] void InvariantBroken(const char* operation, const std::string& message,
                                  const char* file, int line);

// Prints "kvspec: fatal in OPERATION: MESSAGE" to stderr and aborts: what
// the few documented fatal failures (an allocation failure where a refusal
// could not leave the state unchanged) do instead of throwing.
[[noreturn]] void Fatal(const char* operation, const std::string& message);

// Runs f (returning a Status); an allocation failure inside it becomes a
// refusal naming `operation`. Only for operations that allocate everything
// before they change anything, so that the refusal leaves the state unchanged.
template <class F>
Status RefuseOnAllocationFailure(const char* operation, F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return Status::Error(std::string(operation) + " refused: out of memory");
  } catch (const std::length_error&) {
    return Status::Error(std::string(operation) + " refused: larger than the largest allocation");
  }
}

// Runs f (returning a Status); an allocation failure inside it is fatal
// (Fatal): for operations that change the state while they allocate.
template <class F>
Status FatalOnAllocationFailure(const char* operation, F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    Fatal(operation, "out of memory while changing the state");
  } catch (const std::length_error&) {
    Fatal(operation, "an allocation larger than the largest one while changing the state");
  }
}

// Checks object.CheckInvariants() and aborts when it fails (in every build;
// KVSPEC_ASSERT_INVARIANTS is the call that compiles away). It runs after
// an operation changed the object, so a check that runs out of memory (it
// may copy positions or build a message) cannot refuse anything: it is
// skipped, and the operation's own result stands.
template <class T>
void AssertInvariants(const T& object, const char* operation, const char* file, int line) {
  Status s;
  try {
    s = object.CheckInvariants();
  } catch (const std::bad_alloc&) {
    return;
  } catch (const std::length_error&) {
    return;
  }
  if (!s.ok()) InvariantBroken(operation, s.message(), file, line);
}

}  // namespace kvspec

// One line after each operation that changes `object`.
#if KVSPEC_INVARIANTS_CHECKED
#define KVSPEC_ASSERT_INVARIANTS(object, operation) \
  ::kvspec::AssertInvariants((object), (operation), __FILE__, __LINE__)
#else
#define KVSPEC_ASSERT_INVARIANTS(object, operation) ((void)0)
#endif
