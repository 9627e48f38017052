// Shared by the bindings of kvspec._core (module.cc): refusals and bad
// arguments raised as Python exceptions, numpy arrays in and out, index
// checks. Conventions are in module.cc.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kvspec/base/kind.h"
#include "kvspec/base/status.h"
#include "kvspec/core/layout.h"

namespace kvspec {
namespace bindings {

namespace py = pybind11;

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;
using IntArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

// Raises kvspec.errors.Refused (a RuntimeError) carrying the message.
[[noreturn]] void Refuse(const std::string& message);
void Check(const Status& s);
// Bad arguments from Python (shapes, indexes): ValueError, never a crash.
[[noreturn]] void BadArgument(const std::string& message);
void ExpectSize(const py::buffer_info& info, size_t want, const char* what);
py::array_t<float> NewFloats(std::vector<py::ssize_t> shape);

template <typename T>
py::array_t<T> CopyOut(const T* data, std::vector<py::ssize_t> shape) {
  py::array_t<T> a(shape);
  if (a.size()) std::memcpy(a.mutable_data(), data, static_cast<size_t>(a.size()) * sizeof(T));
  return a;
}

// The layer or row index, checked (IndexError when out of range).
size_t CheckLayer(const Layout& layout, py::ssize_t layer);
int CheckRow(const Layout& layout, int row);
CacheKind KindFromName(const std::string& name);
// The storage type named `name` (f32, bf16, q8_0, q4_0), else ValueError.
KvType KvTypeFromName(const std::string& name);
// A forward's columns from the Python arguments (None: no pads).
ForwardColumns Columns(const Layout& layout, int32_t columns, py::object left,
                       py::object right, bool decode);

// The module's parts, each in its own file.
void BindLayerConfig(py::module_& m);
void BindLayout(py::module_& m);
void BindKernels(py::module_& m);
void BindTrace(py::module_& m);

}  // namespace bindings
}  // namespace kvspec
