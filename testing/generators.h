// What the properties, the fuzz targets and the tools share to write the
// traces they generate (docs/TRACE.md): a layer's `layer` line, a
// whole header, statements built from their op structs and the trace text
// of an operation. Header only, needs nothing but the trace format's
// structs (trace/program.h, base/layer_config.h), so that a libFuzzer
// target, a RapidCheck property and a tool can all use it without linking
// more.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <utility>

#include "kvspec/base/layer_config.h"
#include "kvspec/trace/program.h"

namespace kvspec::testing {

// "1,2,3" (or with another separator).
inline std::string JoinInts(const std::vector<int32_t>& values, char sep = ',') {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) s += sep;
    s += std::to_string(values[i]);
  }
  return s;
}

// `ids=` groups: one comma list per row, '/'-separated ("1,2/3/").
inline std::string IdGroups(const std::vector<std::vector<int32_t>>& ids) {
  std::string s;
  for (size_t r = 0; r < ids.size(); ++r) s += (r ? "/" : "") + JoinInts(ids[r]);
  return s;
}

// The `layer` line declaring `layer` (without '\n'): the kind word and the
// keys that matter to that kind (`qheads` where it differs from `heads`).
inline std::string LayerLine(const LayerConfig& layer) {
  std::string s = "layer " + layer.name + " " + std::string(KindName(layer.kind)) +
                  " heads=" + std::to_string(layer.heads);
  if (layer.kind == CacheKind::kSsm) {
    return s + " kheads=" + std::to_string(layer.KeyHeads()) + " dk=" + std::to_string(layer.dk) +
           " dv=" + std::to_string(layer.dv) + " conv=" + std::to_string(layer.conv);
  }
  if (layer.QueryHeads() != layer.heads) s += " qheads=" + std::to_string(layer.QueryHeads());
  s += " dim=" + std::to_string(layer.dim);
  if (layer.window > 0) s += " window=" + std::to_string(layer.window);
  if (layer.kind == CacheKind::kRotating) s += " capacity=" + std::to_string(layer.RingCapacity());
  if (layer.kv != KvType::kF32) s += std::string(" kv=") + KvTypeName(layer.kv);
  return s;
}

// `trace 1`, `rows N` and the layer lines, each ending in '\n'.
inline std::string TraceHeader(int rows, const std::vector<LayerConfig>& layers) {
  std::string s = "trace 1\nrows " + std::to_string(rows) + "\n";
  for (const LayerConfig& layer : layers) s += LayerLine(layer) + "\n";
  return s;
}

// A statement holding `op` (line 0: not from a file).
template <typename Op>
trace::Statement StatementOf(Op op) {
  trace::Statement st;
  st.operation = std::move(op);
  return st;
}

// The trace text of an operation, as the parser reads it back (list
// options only where the statement has them); "" for an expectation.
inline std::string StatementText(const trace::Statement& st) {
  switch (st.op()) {
    case trace::Op::kWindow: {
      const trace::WindowOp& w = st.Get<trace::WindowOp>();
      std::string s = "window " + std::to_string(w.columns);
      if (w.has_left) s += " left=" + JoinInts(w.left);
      if (w.has_right) s += " right=" + JoinInts(w.right);
      if (w.has_ids) s += " ids=" + IdGroups(w.ids);
      return s;
    }
    case trace::Op::kDecode: {
      const trace::DecodeOp& d = st.Get<trace::DecodeOp>();
      return d.has_ids ? "decode ids=" + IdGroups(d.ids) : "decode";
    }
    case trace::Op::kTrim: {
      const trace::TrimOp& t = st.Get<trace::TrimOp>();
      return "trim " + std::to_string(t.count) + (t.bypass ? " bypass" : "");
    }
    case trace::Op::kArm:
      return "arm";
    case trace::Op::kAccept:
      return "accept " + JoinInts(st.Get<trace::AcceptOp>().keep);
    case trace::Op::kFork:
      return "fork " + st.Get<trace::ForkOp>().name;
    case trace::Op::kUse:
      return "use " + st.Get<trace::UseOp>().name;
    case trace::Op::kJoin:
      return "join " + st.Get<trace::JoinOp>().name;
    case trace::Op::kFilter:
      return "filter " + JoinInts(st.Get<trace::FilterOp>().rows);
    case trace::Op::kExtract: {
      const trace::ExtractOp& e = st.Get<trace::ExtractOp>();
      return "extract " + std::to_string(e.row) + " as " + e.name;
    }
    case trace::Op::kReload:
      return "reload";
    default:
      return "";
  }
}

}  // namespace kvspec::testing
