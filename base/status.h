// Status: the result of an operation that can be refused.
//
// A refused operation returns a non-ok Status with a one-line message and
// leaves every object it was called on exactly as it was.
#pragma once

#include <string>
#include <utility>

namespace kvspec {

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  static Status Ok() { return Status(); }
  static Status Error(std::string message) {
    Status s;
    s.ok_ = false;
    s.message_ = std::move(message);
    return s;
  }

  bool ok() const { return ok_; }
  const std::string& message() const { return message_; }

 private:
  bool ok_ = true;
  std::string message_;
};

// Returns early from the enclosing function when `expr` is an error.
#define KVSPEC_RETURN_IF_ERROR(expr)        \
  do {                                      \
    ::kvspec::Status status_ = (expr);      \
    if (!status_.ok()) return status_;      \
  } while (0)

}  // namespace kvspec
