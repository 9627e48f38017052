// kvspec._core's kernels over numpy arrays: attention, the causal conv
// step, the gated delta step and its query/key preparation.
#include <cstdint>
#include <vector>

#include "kvspec/kernels/attention.h"
#include "kvspec/kernels/conv1d.h"
#include "kvspec/kernels/gated_delta.h"
#include "py_common.h"

namespace kvspec {
namespace bindings {
namespace {

// ---------------------------------------------------------------------------
// Kernels over numpy arrays.

py::array_t<float> AttendArrays(FloatArray q, int q_heads, FloatArray k, FloatArray v,
                                IntArray slot_pos, IntArray lo, IntArray hi, int32_t window,
                                int32_t first_slot, bool reference) {
  const py::buffer_info kb = k.request();
  if (kb.ndim != 4) BadArgument("k must be [rows][kv_heads][slots][dim]");
  const int rows = static_cast<int>(kb.shape[0]);
  const int heads = static_cast<int>(kb.shape[1]);
  const int32_t slots = static_cast<int32_t>(kb.shape[2]);
  const int dim = static_cast<int>(kb.shape[3]);
  if (v.request().shape != kb.shape) BadArgument("v must have k's shape");
  const py::buffer_info lb = lo.request();
  if (lb.ndim != 2 || lb.shape[0] != rows || hi.request().shape != lb.shape) {
    BadArgument("lo and hi must be [rows][queries]");
  }
  const int32_t queries = static_cast<int32_t>(lb.shape[1]);
  if (q_heads < 1 || heads < 1 || q_heads % heads != 0) BadArgument("q_heads must be a multiple of kv_heads");
  ExpectSize(q.request(), static_cast<size_t>(rows) * queries * q_heads * dim, "q");
  if (static_cast<size_t>(slot_pos.size()) != static_cast<size_t>(rows) * slots) {
    BadArgument("slot_pos must be [rows][slots]");
  }
  if (slots > 0 && (first_slot < 0 || first_slot >= slots)) BadArgument("first_slot out of range");
  const KvView view =
      KvView::Dense(k.data(), v.data(), slot_pos.data(), rows, heads, dim, slots, first_slot);
  Mask mask;
  mask.window = window;
  mask.rows = rows;
  mask.queries = queries;
  mask.slot_pos = slot_pos.data();
  mask.slot_stride = static_cast<size_t>(slots);
  mask.slots = slots;
  mask.first_slot = first_slot;
  mask.lo.assign(lo.data(), lo.data() + lo.size());
  mask.hi.assign(hi.data(), hi.data() + hi.size());
  mask.query_pos.assign(mask.lo.size(), 0);
  py::array_t<float> out = NewFloats({rows, queries, q_heads, dim});
  (reference ? AttendReference : Attend)(q.data(), q_heads, view, mask, out.mutable_data());
  return out;
}

py::tuple ConvStepArrays(FloatArray w, FloatArray state, FloatArray x, bool reference) {
  const py::buffer_info wb = w.request();
  if (wb.ndim != 2) BadArgument("w must be [K][C]");
  const size_t kernel = static_cast<size_t>(wb.shape[0]);
  const size_t channels = static_cast<size_t>(wb.shape[1]);
  if (kernel < 1 || kernel > kMaxConvKernel) BadArgument("kernel size out of range");
  ExpectSize(state.request(), (kernel - 1) * channels, "state");
  ExpectSize(x.request(), channels, "x");
  py::array_t<float> u = NewFloats({static_cast<py::ssize_t>(channels)});
  py::array_t<float> next = NewFloats({static_cast<py::ssize_t>(kernel - 1),
                                       static_cast<py::ssize_t>(channels)});
  // The kernels' order (kernels/conv1d.h) in between; the arrays are in
  // trace order.
  std::vector<float> packed(kernel * channels), s((kernel - 1) * channels);
  PackConvWeights(w.data(), packed.data(), channels, kernel);
  ConvStateFromTrace(state.data(), s.data(), channels, kernel);
  (reference ? ConvStepReference : ConvStep)(packed.data(), s.data(), s.data(), x.data(),
                                             u.mutable_data(), channels, kernel);
  ConvStateToTrace(s.data(), next.mutable_data(), channels, kernel);
  return py::make_tuple(u, next);
}

GatedDeltaShape DeltaShape(size_t value_heads, size_t key_heads, size_t dk, size_t dv,
                           bool gate_per_lane) {
  if (value_heads < 1 || key_heads < 1 || value_heads % key_heads != 0 || dk < 1 || dv < 1) {
    BadArgument("bad gated delta shape");
  }
  GatedDeltaShape s;
  s.value_heads = value_heads;
  s.key_heads = key_heads;
  s.dk = dk;
  s.dv = dv;
  s.gate_per_lane = gate_per_lane;
  return s;
}

py::tuple PrepareArrays(FloatArray q_raw, FloatArray k_raw, size_t key_heads, size_t dk,
                        bool reference) {
  const GatedDeltaShape s = DeltaShape(key_heads, key_heads, dk, 1, false);
  ExpectSize(q_raw.request(), key_heads * dk, "q_raw");
  ExpectSize(k_raw.request(), key_heads * dk, "k_raw");
  const std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(key_heads),
                                          static_cast<py::ssize_t>(dk)};
  py::array_t<float> q = NewFloats(shape), k = NewFloats(shape);
  (reference ? PrepareQueryKeyReference : PrepareQueryKey)(q_raw.data(), k_raw.data(),
                                                         q.mutable_data(), k.mutable_data(), s);
  return py::make_tuple(q, k);
}

py::tuple GatedDeltaArrays(FloatArray state, FloatArray q, FloatArray k, FloatArray v,
                           FloatArray g, FloatArray beta, size_t key_heads, bool reference) {
  const py::buffer_info sb = state.request();
  if (sb.ndim != 3) BadArgument("state must be [Hv][dv][dk]");
  const size_t hv = static_cast<size_t>(sb.shape[0]);
  const size_t dv = static_cast<size_t>(sb.shape[1]);
  const size_t dk = static_cast<size_t>(sb.shape[2]);
  const bool per_lane = static_cast<size_t>(g.size()) == hv * dk && dk != 1;
  const GatedDeltaShape s = DeltaShape(hv, key_heads, dk, dv, per_lane);
  ExpectSize(q.request(), key_heads * dk, "q");
  ExpectSize(k.request(), key_heads * dk, "k");
  ExpectSize(v.request(), hv * dv, "v");
  if (!per_lane) ExpectSize(g.request(), hv, "g");
  ExpectSize(beta.request(), hv, "beta");
  py::array_t<float> next = NewFloats(sb.shape);
  py::array_t<float> y = NewFloats({static_cast<py::ssize_t>(hv), static_cast<py::ssize_t>(dv)});
  if (reference) {
    GatedDeltaStepReference(state.data(), next.mutable_data(), q.data(), k.data(), v.data(),
                            g.data(), beta.data(), y.mutable_data(), s);
  } else {
    // The Highway kernel keeps its states in kernel order (gated_delta.h).
    std::vector<float> kernel_order(hv * dv * dk);
    GatedDeltaStateFromTrace(state.data(), kernel_order.data(), s);
    GatedDeltaStep(kernel_order.data(), kernel_order.data(), q.data(), k.data(), v.data(),
                   g.data(), beta.data(), y.mutable_data(), s);
    GatedDeltaStateToTrace(kernel_order.data(), next.mutable_data(), s);
  }
  return py::make_tuple(next, y);
}

}  // namespace

void BindKernels(py::module_& m) {
  m.def("attend", &AttendArrays, py::arg("q"), py::arg("q_heads"), py::arg("k"), py::arg("v"),
        py::arg("slot_pos"), py::arg("lo"), py::arg("hi"), py::arg("window") = 0,
        py::arg("first_slot") = 0, py::arg("reference") = false);
  m.def("conv_step", &ConvStepArrays, py::arg("w"), py::arg("state"), py::arg("x"),
        py::arg("reference") = false);
  m.def("prepare_query_key", &PrepareArrays, py::arg("q_raw"), py::arg("k_raw"),
        py::arg("key_heads"), py::arg("dk"), py::arg("reference") = false);
  m.def("gated_delta_step", &GatedDeltaArrays, py::arg("state"), py::arg("q"), py::arg("k"),
        py::arg("v"), py::arg("g"), py::arg("beta"), py::arg("key_heads"),
        py::arg("reference") = false);
  m.def("attention_target", &AttentionTargetName);
  m.attr("ATTENTION_TOLERANCE") = kAttentionTolerance;
  m.attr("CONV_TOLERANCE") = kConvTolerance;
  m.attr("GATED_DELTA_TOLERANCE") = kGatedDeltaTolerance;
}

}  // namespace bindings
}  // namespace kvspec
