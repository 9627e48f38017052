// The shared helpers of py_common.h.
#include "py_common.h"

#include <algorithm>

namespace kvspec {
namespace bindings {

// Raises kvspec.errors.Refused (a RuntimeError) carrying the message.
[[noreturn]] void Refuse(const std::string& message) {
  static py::object refused = py::module_::import("kvspec.errors").attr("Refused");
  PyErr_SetString(refused.ptr(), message.c_str());
  throw py::error_already_set();
}

void Check(const Status& s) {
  if (!s.ok()) Refuse(s.message());
}

// Bad arguments from Python (shapes, indexes): ValueError, never a crash.
[[noreturn]] void BadArgument(const std::string& message) { throw py::value_error(message); }

void ExpectSize(const py::buffer_info& info, size_t want, const char* what) {
  if (static_cast<size_t>(info.size) != want) {
    BadArgument(std::string(what) + " has " + std::to_string(info.size) +
                " floats, expected " + std::to_string(want));
  }
}

py::array_t<float> NewFloats(std::vector<py::ssize_t> shape) {
  py::array_t<float> a(shape);
  std::fill(a.mutable_data(), a.mutable_data() + a.size(), 0.0f);
  return a;
}

size_t CheckLayer(const Layout& layout, py::ssize_t layer) {
  if (layer < 0 || static_cast<size_t>(layer) >= layout.size()) {
    throw py::index_error("layer " + std::to_string(layer) + " out of range (" +
                          std::to_string(layout.size()) + " layers)");
  }
  return static_cast<size_t>(layer);
}

int CheckRow(const Layout& layout, int row) {
  if (row < 0 || row >= layout.rows()) {
    throw py::index_error("row " + std::to_string(row) + " out of range (" +
                          std::to_string(layout.rows()) + " rows)");
  }
  return row;
}

CacheKind KindFromName(const std::string& name) {
  CacheKind kind = CacheKind::kKv;
  if (!ParseKindName(name, &kind)) BadArgument("unknown layer kind '" + name + "'");
  return kind;
}

KvType KvTypeFromName(const std::string& name) {
  KvType type = KvType::kF32;
  if (!ParseKvType(name, &type)) {
    BadArgument("unknown storage type '" + name + "' (expected f32, bf16, q8_0 or q4_0)");
  }
  return type;
}

ForwardColumns Columns(const Layout& layout, int32_t columns, py::object left,
                       py::object right, bool decode) {
  ForwardColumns cols = ForwardColumns::Dense(layout.rows(), columns, decode);
  if (!left.is_none()) cols.left = left.cast<std::vector<int32_t>>();
  if (!right.is_none()) cols.right = right.cast<std::vector<int32_t>>();
  return cols;
}

}  // namespace bindings
}  // namespace kvspec
