// kvspec._core: the Python face of kvspec's core, codec, kernels and trace
// library (docs/python.md). The pure-Python package (python/kvspec/) wraps
// it; nothing here re-implements a rule of the core.
//
// Conventions:
// - A refused operation (a non-ok Status) raises kvspec.errors.Refused with
//   the library's message; the library guarantees the state is unchanged.
// - numpy arrays go in as float32 C-contiguous buffers: an array that is
//   already one is read in place (no copy); anything else is converted once.
//   Outputs are fresh arrays the core writes into directly, or the caller's
//   own arrays (`out=`), written in place.
// - Reads of stored state (views, masks, conv and recurrent states) are
//   copies: the core's buffers move on the next operation.
#include "py_common.h"

PYBIND11_MODULE(_core, m) {
  using namespace kvspec::bindings;
  m.doc() = "kvspec's core, codec, kernels and trace library (see docs/python.md)";
  BindLayerConfig(m);
  BindLayout(m);
  BindKernels(m);
  BindTrace(m);
}
