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
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kvspec/core/codec/codec.h"
#include "kvspec/base/kind.h"
#include "kvspec/base/layer_config.h"
#include "kvspec/core/layout.h"
#include "kvspec/kernels/attention.h"
#include "kvspec/kernels/conv1d.h"
#include "kvspec/kernels/gated_delta.h"
#include "kvspec/trace/json.h"
#include "kvspec/trace/program.h"
#include "kvspec/trace/program.h"
#include "kvspec/runner/runner.h"

namespace py = pybind11;

namespace kvspec {
namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;
using IntArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

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

template <typename T>
py::array_t<T> CopyOut(const T* data, std::vector<py::ssize_t> shape) {
  py::array_t<T> a(shape);
  if (a.size()) std::memcpy(a.mutable_data(), data, static_cast<size_t>(a.size()) * sizeof(T));
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

ForwardColumns Columns(const Layout& layout, int32_t columns, py::object left,
                       py::object right, bool decode) {
  ForwardColumns cols = ForwardColumns::Dense(layout.rows(), columns, decode);
  if (!left.is_none()) cols.left = left.cast<std::vector<int32_t>>();
  if (!right.is_none()) cols.right = right.cast<std::vector<int32_t>>();
  return cols;
}

// ---------------------------------------------------------------------------
// Layout.forward with numpy arrays.

struct ForwardBuffers {
  std::vector<FloatArray> keep;  // inputs held alive (no copy when contiguous)
  std::vector<AttentionIO> io;
  py::list outputs;
};

FloatArray Input(py::handle h, ForwardBuffers* b) {
  FloatArray a = FloatArray::ensure(h);
  if (!a) BadArgument("expected an array of floats");
  b->keep.push_back(a);
  return a;
}

// Per layer: attention (q, k, v) or recurrent (conv_weights, x, gate, beta);
// `out` optionally gives the arrays to write (float32, C-contiguous).
ForwardBuffers ForwardInputs(const Layout& layout, const ForwardColumns& cols,
                             const py::sequence& inputs, const py::object& out) {
  if (inputs.size() != layout.size()) {
    BadArgument("inputs has " + std::to_string(inputs.size()) + " entries for " +
                std::to_string(layout.size()) + " layers");
  }
  ForwardBuffers b;
  const size_t rl = static_cast<size_t>(layout.rows()) * static_cast<size_t>(cols.columns);
  for (size_t l = 0; l < layout.size(); ++l) {
    const LayerConfig& c = layout.config(l);
    py::sequence entry = inputs[l].cast<py::sequence>();
    std::vector<py::ssize_t> shape;
    size_t out_floats = 0;
    if (c.kind == CacheKind::kSsm) {
      if (entry.size() != 4) BadArgument("a recurrent layer takes (conv_weights, x, gate, beta)");
      const size_t C = c.SsmChannels();
      FloatArray w = Input(entry[0], &b), x = Input(entry[1], &b), g = Input(entry[2], &b),
                 beta = Input(entry[3], &b);
      ExpectSize(w.request(), static_cast<size_t>(c.conv) * C, "conv_weights");
      ExpectSize(x.request(), rl * C, "x");
      ExpectSize(g.request(), rl * static_cast<size_t>(c.heads), "gate");
      ExpectSize(beta.request(), rl * static_cast<size_t>(c.heads), "beta");
      SsmIO ssm;
      ssm.conv_weights = w.data();
      ssm.x = x.data();
      ssm.gate = g.data();
      ssm.beta = beta.data();
      b.io.emplace_back(ssm);
      shape = {layout.rows(), cols.columns, c.heads, c.dv};
      out_floats = rl * static_cast<size_t>(c.heads) * static_cast<size_t>(c.dv);
    } else {
      if (entry.size() != 3) BadArgument("an attention layer takes (q, k, v)");
      FloatArray q = Input(entry[0], &b), k = Input(entry[1], &b), v = Input(entry[2], &b);
      const size_t hd = static_cast<size_t>(c.heads) * static_cast<size_t>(c.dim);
      ExpectSize(q.request(), rl * static_cast<size_t>(c.QueryHeads()) * c.dim, "q");
      ExpectSize(k.request(), rl * hd, "k");
      ExpectSize(v.request(), rl * hd, "v");
      b.io.emplace_back(q.data(), k.data(), v.data(), nullptr);
      shape = {layout.rows(), cols.columns, c.QueryHeads(), c.dim};
      out_floats = rl * static_cast<size_t>(c.QueryHeads()) * static_cast<size_t>(c.dim);
    }
    py::array_t<float> o;
    if (!out.is_none() && !out.cast<py::sequence>()[l].is_none()) {
      py::object given = out.cast<py::sequence>()[l];
      if (!py::isinstance<py::array_t<float>>(given)) BadArgument("out arrays must be float32");
      o = given.cast<py::array_t<float>>();
      if (!(o.flags() & py::array::c_style) || !o.writeable()) {
        BadArgument("out arrays must be writeable and C-contiguous");
      }
      ExpectSize(o.request(), out_floats, "out");
    } else {
      o = NewFloats(shape);
    }
    if (c.kind == CacheKind::kSsm) {
      b.io.back().ssm.y = o.mutable_data();
    } else {
      b.io.back().out = o.mutable_data();
    }
    b.outputs.append(o);
  }
  return b;
}

py::list LayoutForward(Layout& layout, int32_t columns, const py::sequence& inputs,
                       py::object left, py::object right, bool decode, py::object out) {
  const ForwardColumns cols = Columns(layout, columns, left, right, decode);
  Check(layout.CheckForward(cols));
  ForwardBuffers b = ForwardInputs(layout, cols, inputs, out);
  Check(layout.Forward(cols, b.io));
  return b.outputs;
}

// ---------------------------------------------------------------------------
// Observation of a layout.

py::object LastMask(const Layout& layout, py::ssize_t layer) {
  const Mask* mask = layout.LastMask(CheckLayer(layout, layer));
  if (!mask) return py::none();
  py::dict d;
  const py::ssize_t rows = mask->rows, queries = mask->queries;
  d["window"] = mask->window;
  d["rows"] = mask->rows;
  d["queries"] = mask->queries;
  d["slots"] = mask->slots;
  d["first_slot"] = mask->first_slot;
  py::array_t<int32_t> slot_pos({rows, static_cast<py::ssize_t>(mask->slots)});
  for (py::ssize_t r = 0; r < rows; ++r) {
    std::memcpy(slot_pos.mutable_data(r, 0), mask->slot_pos + r * mask->slot_stride,
                static_cast<size_t>(mask->slots) * sizeof(int32_t));
  }
  d["slot_pos"] = slot_pos;
  d["query_pos"] = CopyOut(mask->query_pos.data(), {rows, queries});
  d["lo"] = CopyOut(mask->lo.data(), {rows, queries});
  d["hi"] = CopyOut(mask->hi.data(), {rows, queries});
  // admits[r][q][s]: what the kernel reads.
  py::array_t<bool> admits({rows, queries, static_cast<py::ssize_t>(mask->slots)});
  for (int r = 0; r < mask->rows; ++r) {
    for (int32_t q = 0; q < mask->queries; ++q) {
      for (int32_t s = 0; s < mask->slots; ++s) *admits.mutable_data(r, q, s) = mask->Admits(r, q, s);
    }
  }
  d["admits"] = admits;
  return std::move(d);
}

py::dict KvViewDict(const Layout& layout, py::ssize_t layer) {
  const AttentionCache* cache = layout.attention(CheckLayer(layout, layer));
  if (!cache) BadArgument("layer " + std::to_string(layer) + " is not an attention layer");
  const KvView v = cache->View();
  py::dict d;
  const py::ssize_t rows = v.rows, heads = v.kv_heads, slots = v.slots, dim = v.dim;
  py::array_t<float> k({rows, heads, slots, dim}), val({rows, heads, slots, dim});
  py::array_t<int32_t> slot_pos({rows, slots});
  for (int r = 0; r < v.rows; ++r) {
    for (int h = 0; h < v.kv_heads; ++h) {
      for (int32_t s = 0; s < v.slots; ++s) {
        std::memcpy(k.mutable_data(r, h, s, 0), v.Key(r, h, s), static_cast<size_t>(dim) * 4);
        std::memcpy(val.mutable_data(r, h, s, 0), v.Value(r, h, s), static_cast<size_t>(dim) * 4);
      }
    }
    std::memcpy(slot_pos.mutable_data(r, 0), v.slot_pos + r * v.slot_stride,
                static_cast<size_t>(slots) * sizeof(int32_t));
  }
  d["k"] = k;
  d["v"] = val;
  d["slot_pos"] = slot_pos;
  d["first_slot"] = v.first_slot;
  d["window"] = cache->window();
  d["ring_capacity"] = cache->ringCapacity();
  return d;
}

std::vector<int32_t> LogicalSlots(const Layout& layout, py::ssize_t layer, int row) {
  const AttentionCache* cache = layout.attention(CheckLayer(layout, layer));
  if (!cache) BadArgument("layer " + std::to_string(layer) + " is not an attention layer");
  return cache->LogicalSlots(CheckRow(layout, row));
}

const SsmCacheBase& Recurrent(const Layout& layout, py::ssize_t layer) {
  const SsmCacheBase* ssm = layout.recurrent(CheckLayer(layout, layer));
  if (!ssm) BadArgument("layer " + std::to_string(layer) + " is not a recurrent layer");
  return *ssm;
}

// The first observable difference between two layouts (TRACE.md rule 9),
// or "": the comparison `expect equal` makes.
std::string Difference(const Layout& a, const Layout& b) {
  auto join = [](const std::vector<int32_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s;
  };
  if (a.rows() != b.rows()) {
    return "rows " + std::to_string(a.rows()) + " vs " + std::to_string(b.rows());
  }
  if (a.positions() != b.positions()) {
    return "positions " + join(a.positions()) + " vs " + join(b.positions());
  }
  if (a.size() != b.size()) return "layer counts differ";
  for (size_t l = 0; l < a.size(); ++l) {
    const std::string name = a.config(l).name;
    const SsmCacheBase* ra = a.recurrent(l);
    const SsmCacheBase* rb = b.recurrent(l);
    if (ra && rb) {
      const SsmShape& shape = ra->shape();
      for (int r = 0; r < a.rows(); ++r) {
        if (std::memcmp(ra->ConvState(r), rb->ConvState(r), shape.ConvFloats() * 4) != 0) {
          return "layer " + name + " row " + std::to_string(r) + ": conv state differs";
        }
        if (std::memcmp(ra->RecurrentState(r), rb->RecurrentState(r),
                        shape.RecurrentFloats() * 4) != 0) {
          return "layer " + name + " row " + std::to_string(r) + ": recurrent state differs";
        }
      }
      continue;
    }
    const AttentionCache* ca = a.attention(l);
    const AttentionCache* cb = b.attention(l);
    if (!ca || !cb) {
      if (ca || cb || ra || rb) return "layer " + name + ": kinds differ";
      continue;
    }
    const KvView va = ca->View(), vb = cb->View();
    const size_t dim = static_cast<size_t>(va.dim);
    const std::vector<int32_t> next = a.positions();
    for (int r = 0; r < a.rows(); ++r) {
      const std::vector<int32_t> sa = ca->LogicalSlots(r), sb = cb->LogicalSlots(r);
      size_t keep = static_cast<size_t>(next[static_cast<size_t>(r)]);
      if (IsRotatingCache(ca->kind())) {
        keep = std::min(keep, static_cast<size_t>(ca->window() - 1));
      }
      const std::string where = "layer " + name + " row " + std::to_string(r);
      if (sa.size() < keep || sb.size() < keep) {
        return where + " holds " + std::to_string(sa.size()) + " vs " +
               std::to_string(sb.size()) + " tokens, " + std::to_string(keep) + " compared";
      }
      for (size_t i = 0; i < keep; ++i) {
        const int32_t xa = sa[sa.size() - keep + i], xb = sb[sb.size() - keep + i];
        const int32_t pa = va.slot_pos[r * va.slot_stride + static_cast<size_t>(xa)];
        bool same = pa == vb.slot_pos[r * vb.slot_stride + static_cast<size_t>(xb)];
        for (int h = 0; same && h < va.kv_heads; ++h) {
          same = std::memcmp(va.Key(r, h, xa), vb.Key(r, h, xb), dim * 4) == 0 &&
                 std::memcmp(va.Value(r, h, xa), vb.Value(r, h, xb), dim * 4) == 0;
        }
        if (!same) return where + " position " + std::to_string(pa) + " differs";
      }
    }
  }
  return "";
}

// ---------------------------------------------------------------------------
// Trace contents (TRACE.md "Values") driven through a layout: what
// kvspec.adapters.reference runs. One ContentIndex serves every layout of
// a trace (contents depend on (layer, id, pos) only).

struct TraceContents {
  trace::ContentIndex index;
  std::map<size_t, std::vector<float>> conv_weights;  // per ssm layer, [K][C]
  std::map<size_t, std::vector<float>> packed;        // the same, PackConvWeights

  const std::vector<float>& Weights(size_t l, const LayerConfig& d) {
    auto it = conv_weights.find(l);
    if (it == conv_weights.end()) {
      const size_t C = d.SsmChannels(), K = static_cast<size_t>(d.conv);
      it = conv_weights.emplace(l, trace::ContentIndex::ConvWeights(static_cast<int>(l), C, K))
               .first;
      std::vector<float> p(K * C);
      PackConvWeights(it->second.data(), p.data(), C, K);
      packed[l] = std::move(p);
    }
    return it->second;
  }
  const std::vector<float>& Packed(size_t l, const LayerConfig& d) {
    Weights(l, d);
    return packed[l];
  }
};

py::object TagObject(const trace::Tag& t) {
  switch (t.kind) {
    case trace::Tag::kToken:
      return py::make_tuple(t.pos, t.id);
    case trace::Tag::kPad:
      return py::str("pad");
    case trace::Tag::kZero:
      return py::str("zero");
    case trace::Tag::kJunk:
      return py::str("junk");
  }
  return py::none();
}

// One forward of trace tokens (what kvspec.adapters.reference runs), in
// the steps of the trace runner: the ids, the contents, the forward, then
// what every real query saw, read back from the stored bytes.
class TokenForward {
 public:
  TokenForward(Layout& layout, TraceContents& contents, ForwardColumns cols)
      : layout_(layout), contents_(contents), cols_(std::move(cols)),
        before_(layout.positions()), n_(layout.size()) {}

  // Each row's ids: as given (one group per row, one id per real token) or
  // the positions.
  void SetIds(const py::object& ids_in) {
    const int rows = layout_.rows();
    ids_.assign(static_cast<size_t>(rows), {});
    if (!ids_in.is_none()) {
      ids_ = ids_in.cast<std::vector<std::vector<int32_t>>>();
      if (ids_.size() != static_cast<size_t>(rows)) {
        Refuse("ids= has " + std::to_string(ids_.size()) + " groups for " +
               std::to_string(rows) + " rows");
      }
    }
    for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
      const int32_t real = cols_.Real(r);
      if (ids_in.is_none()) {
        for (int32_t j = 0; j < real; ++j) ids_[r].push_back(before_[r] + j);
      } else if (ids_[r].size() != static_cast<size_t>(real)) {
        Refuse("ids= gives row " + std::to_string(r) + " " + std::to_string(ids_[r].size()) +
               " ids for " + std::to_string(real) + " real tokens");
      }
    }
  }

  void Run() {
    q_.resize(n_), k_.resize(n_), v_.resize(n_), o_.resize(n_);
    x_.resize(n_), gate_.resize(n_), beta_.resize(n_);
    io_.resize(n_);
    for (size_t l = 0; l < n_; ++l) {
      if (layout_.config(l).kind == CacheKind::kSsm) {
        FillRecurrent(l);
      } else {
        FillAttention(l);
      }
    }
    Check(layout_.Forward(cols_, io_));
    for (size_t l = 0; l < n_; ++l) {
      if (layout_.config(l).kind != CacheKind::kSsm) Remember(l);
    }
  }

  // (seen, outs): dicts keyed by (layer, row, pos) of what each real query
  // saw (tuples (pos, id), or "pad"/"zero"/"junk" for admitted slots that
  // hold no written token) and of its output values.
  py::tuple Observed() const {
    py::dict seen, outs;
    for (size_t l = 0; l < n_; ++l) {
      const LayerConfig& d = layout_.config(l);
      const AttentionCache* cache = layout_.attention(l);
      const Mask* mask = cache ? layout_.LastMask(l) : nullptr;
      const KvView view = cache ? cache->View() : KvView();
      const size_t per = cache ? static_cast<size_t>(d.QueryHeads()) * static_cast<size_t>(d.dim)
                               : static_cast<size_t>(d.heads) * static_cast<size_t>(d.dv);
      for (int r = 0; r < layout_.rows(); ++r) {
        const size_t ur = static_cast<size_t>(r);
        for (int32_t j = 0; j < cols_.Real(ur); ++j) {
          const int32_t col = cols_.left[ur] + j;
          py::tuple key = py::make_tuple(l, r, before_[ur] + j);
          if (cache && mask) {
            std::vector<trace::Tag> tags;
            for (int32_t slot = 0; slot < mask->slots; ++slot) {
              if (mask->Admits(r, col, slot)) {
                tags.push_back(contents_.index.Recover(static_cast<int>(l), view, r, slot));
              }
            }
            std::sort(tags.begin(), tags.end());
            py::list items;
            for (const trace::Tag& t : tags) items.append(TagObject(t));
            seen[key] = items;
          }
          const float* ov = &o_[l][Column(ur, col) * per];
          outs[key] = std::vector<float>(ov, ov + per);
        }
      }
    }
    return py::make_tuple(seen, outs);
  }

 private:
  size_t Column(size_t row, int32_t col) const {
    return row * static_cast<size_t>(cols_.columns) + static_cast<size_t>(col);
  }
  size_t Slots() const {
    return static_cast<size_t>(layout_.rows()) * static_cast<size_t>(cols_.columns);
  }

  void FillRecurrent(size_t l) {
    const LayerConfig& d = layout_.config(l);
    const size_t C = d.SsmChannels();
    const size_t hv = static_cast<size_t>(d.heads);
    const float pad = trace::ContentIndex::PadValue();
    x_[l].assign(Slots() * C, pad);
    gate_[l].assign(Slots() * hv, pad);
    beta_[l].assign(gate_[l].size(), pad);
    o_[l].assign(Slots() * hv * static_cast<size_t>(d.dv), 0.0f);
    for (size_t r = 0; r < static_cast<size_t>(layout_.rows()); ++r) {
      for (int32_t j = 0; j < cols_.Real(r); ++j) {
        const size_t c = Column(r, cols_.left[r] + j);
        trace::ContentIndex::RecurrentToken(static_cast<int>(l), ids_[r][static_cast<size_t>(j)],
                                            before_[r] + j, C, hv, &x_[l][c * C],
                                            &gate_[l][c * hv], &beta_[l][c * hv]);
      }
    }
    SsmIO ssm;
    ssm.conv_weights = contents_.Weights(l, d).data();
    ssm.packed_conv_weights = contents_.Packed(l, d).data();
    ssm.x = x_[l].data();
    ssm.gate = gate_[l].data();
    ssm.beta = beta_[l].data();
    ssm.y = o_[l].data();
    io_[l] = AttentionIO(ssm);
  }

  // As the trace runner: a token draws q [q_heads * dim], then k and v [heads * dim].
  void FillAttention(size_t l) {
    const LayerConfig& d = layout_.config(l);
    const size_t hd = static_cast<size_t>(d.heads) * static_cast<size_t>(d.dim);
    const size_t qd = static_cast<size_t>(d.QueryHeads()) * static_cast<size_t>(d.dim);
    const float pad = trace::ContentIndex::PadValue();
    q_[l].assign(Slots() * qd, pad);
    k_[l].assign(Slots() * hd, pad);
    v_[l].assign(Slots() * hd, pad);
    o_[l].assign(Slots() * qd, 0.0f);
    for (size_t r = 0; r < static_cast<size_t>(layout_.rows()); ++r) {
      for (int32_t j = 0; j < cols_.Real(r); ++j) {
        const size_t c = Column(r, cols_.left[r] + j);
        trace::ContentIndex::AttentionToken(static_cast<int>(l), ids_[r][static_cast<size_t>(j)],
                                            before_[r] + j, d.QueryHeads(), d.heads, d.dim,
                                            &q_[l][c * qd], &k_[l][c * hd], &v_[l][c * hd]);
      }
    }
    io_[l] = AttentionIO{q_[l].data(), k_[l].data(), v_[l].data(), o_[l].data()};
  }

  // Every written token's tag, by its stored bytes.
  void Remember(size_t l) {
    const LayerConfig& d = layout_.config(l);
    const size_t hd = static_cast<size_t>(d.heads) * static_cast<size_t>(d.dim);
    for (size_t r = 0; r < static_cast<size_t>(layout_.rows()); ++r) {
      for (int32_t j = 0; j < cols_.Real(r); ++j) {
        const size_t at = Column(r, cols_.left[r] + j) * hd;
        contents_.index.Remember(static_cast<int>(l), ids_[r][static_cast<size_t>(j)],
                                 before_[r] + j, &k_[l][at], &v_[l][at], hd);
      }
    }
  }

  Layout& layout_;
  TraceContents& contents_;
  const ForwardColumns cols_;
  const std::vector<int32_t> before_;
  const size_t n_;
  std::vector<std::vector<int32_t>> ids_;
  std::vector<std::vector<float>> q_, k_, v_, o_, x_, gate_, beta_;
  std::vector<AttentionIO> io_;
};

py::tuple TraceForward(Layout& layout, TraceContents& contents, int32_t columns,
                       py::object left, py::object right, py::object ids, bool decode) {
  ForwardColumns cols = Columns(layout, columns, left, right, decode);
  Check(layout.CheckForward(cols));
  TokenForward forward(layout, contents, std::move(cols));
  forward.SetIds(ids);
  forward.Run();
  return forward.Observed();
}

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

// ---------------------------------------------------------------------------
// The trace library.

py::object ParseTraceJson(const std::string& text, const std::string& file) {
  trace::Program program;
  trace::SyntaxError error;
  if (!trace::ParseTrace(text, file, &program, &error)) {
    static py::object syntax = py::module_::import("kvspec.errors").attr("TraceSyntaxError");
    PyErr_SetString(syntax.ptr(), error.ToString().c_str());
    throw py::error_already_set();
  }
  return py::module_::import("json").attr("loads")(trace::ProgramToJson(program));
}

py::tuple RunTrace(const std::string& text, const std::string& name, bool values, bool emit,
                   bool reference) {
  trace::RunOptions options;
  options.values = values;
  options.emit = emit;
  options.reference_kernels = reference;
  std::ostringstream out, err;
  const int status = trace::RunTraceText(text, name, options, out, err);
  return py::make_tuple(status, out.str(), err.str());
}

std::unique_ptr<Layout> CreateLayout(int rows, const std::vector<LayerConfig>& layers) {
  std::unique_ptr<Layout> layout;
  Check(Layout::Create(rows, layers, &layout));
  return layout;
}

void BindLayerConfig(py::module_& m) {
  py::class_<LayerConfig>(m, "LayerConfig")
      .def(py::init([](const std::string& name, const std::string& kind, int heads, int q_heads,
                       int dim, int32_t window, int32_t capacity, int kheads, int dk, int dv,
                       int conv) {
             LayerConfig c;
             c.name = name;
             c.kind = KindFromName(kind);
             c.heads = heads;
             c.q_heads = q_heads;
             c.dim = dim;
             c.window = window;
             c.capacity = capacity;
             c.kheads = kheads;
             c.dk = dk;
             c.dv = dv;
             c.conv = conv;
             return c;
           }),
           py::arg("name"), py::arg("kind") = "kv", py::arg("heads") = 1, py::arg("q_heads") = 0,
           py::arg("dim") = 4, py::arg("window") = 0, py::arg("capacity") = 0,
           py::arg("kheads") = 0, py::arg("dk") = 4, py::arg("dv") = 4, py::arg("conv") = 4)
      .def_readwrite("name", &LayerConfig::name)
      .def_property(
          "kind", [](const LayerConfig& c) { return std::string(KindName(c.kind)); },
          [](LayerConfig& c, const std::string& k) { c.kind = KindFromName(k); })
      .def_readwrite("heads", &LayerConfig::heads)
      .def_readwrite("q_heads", &LayerConfig::q_heads)
      .def_readwrite("dim", &LayerConfig::dim)
      .def_readwrite("window", &LayerConfig::window)
      .def_readwrite("capacity", &LayerConfig::capacity)
      .def_readwrite("kheads", &LayerConfig::kheads)
      .def_readwrite("dk", &LayerConfig::dk)
      .def_readwrite("dv", &LayerConfig::dv)
      .def_readwrite("conv", &LayerConfig::conv)
      .def("query_heads", &LayerConfig::QueryHeads)
      .def("key_heads", &LayerConfig::KeyHeads)
      .def("ring_capacity", &LayerConfig::RingCapacity)
      .def("ssm_channels", &LayerConfig::SsmChannels)
      .def("__repr__", [](const LayerConfig& c) {
        return "LayerConfig(name='" + c.name + "', kind='" + std::string(KindName(c.kind)) +
               "', heads=" + std::to_string(c.heads) + ", dim=" + std::to_string(c.dim) +
               ", window=" + std::to_string(c.window) + ")";
      });
}

void BindLayout(py::module_& m) {
  py::class_<Layout>(m, "Layout")
      .def(py::init(&CreateLayout), py::arg("rows"), py::arg("layers"))
      .def_property_readonly("rows", &Layout::rows)
      .def("__len__", &Layout::size)
      .def("config", [](const Layout& l, py::ssize_t i) { return l.config(CheckLayer(l, i)); })
      .def("positions", &Layout::positions)
      .def("columns", &Layout::columns)
      .def("allocated_bytes", &Layout::allocatedBytes)
      .def("kind", [](const Layout& l, py::ssize_t i) { return l.cache(CheckLayer(l, i)).kind(); })
      .def("trimmable",
           [](const Layout& l, py::ssize_t i) { return l.cache(CheckLayer(l, i)).isTrimmable(); })
      .def("bytes_per_token",
           [](const Layout& l, py::ssize_t i) { return l.cache(CheckLayer(l, i)).bytesPerToken(); })
      .def("forward", &LayoutForward, py::arg("columns"), py::arg("inputs"),
           py::arg("left") = py::none(), py::arg("right") = py::none(),
           py::arg("decode") = false, py::arg("out") = py::none())
      .def("check_forward",
           [](const Layout& l, int32_t columns, py::object left, py::object right, bool decode) {
             Check(l.CheckForward(Columns(l, columns, left, right, decode)));
           },
           py::arg("columns"), py::arg("left") = py::none(), py::arg("right") = py::none(),
           py::arg("decode") = false)
      .def("trim", [](Layout& l, int32_t n, bool bypass) { Check(l.Trim(n, bypass)); },
           py::arg("n"), py::arg("bypass") = false)
      .def("arm", [](Layout& l) { Check(l.Arm()); })
      .def("accept", [](Layout& l, const std::vector<int32_t>& keep) { Check(l.Accept(keep)); })
      .def_property_readonly("armed", &Layout::armed)
      .def_property_readonly("verified", &Layout::verified)
      .def("filter", [](Layout& l, const std::vector<int32_t>& rows) { Check(l.Filter(rows)); })
      .def("join", [](Layout& l, const Layout& other) { Check(l.Join(other)); })
      .def("extract",
           [](const Layout& l, int32_t row) {
             std::unique_ptr<Layout> out;
             Check(l.Extract(row, &out));
             return out;
           })
      .def("copy", &Layout::Copy)
      .def("__copy__", &Layout::Copy)
      .def("__deepcopy__", [](const Layout& l, py::object) { return l.Copy(); })
      .def("state_hash", &Layout::StateHash)
      .def("forget_bypass_bound", &Layout::ForgetBypassBound)
      .def_property("reference_kernels", &Layout::reference_kernels,
                    &Layout::set_reference_kernels)
      .def("last_mask", &LastMask)
      .def("kv_view", &KvViewDict)
      .def("logical_slots", &LogicalSlots)
      .def("conv_state",
           [](const Layout& l, py::ssize_t layer, int row) {
             const SsmCacheBase& s = Recurrent(l, layer);
             const SsmShape& sh = s.shape();
             return CopyOut(s.ConvStateTraceOrder(CheckRow(l, row)).data(),
                            {sh.conv - 1, static_cast<py::ssize_t>(sh.Channels())});
           })
      .def("recurrent_state",
           [](const Layout& l, py::ssize_t layer, int row) {
             const SsmCacheBase& s = Recurrent(l, layer);
             const SsmShape& sh = s.shape();
             return CopyOut(s.RecurrentStateTraceOrder(CheckRow(l, row)).data(),
                            {sh.value_heads, sh.dv, sh.dk});
           })
      .def("row_state_hash",
           [](const Layout& l, py::ssize_t layer, int row) {
             return Recurrent(l, layer).RowStateHash(CheckRow(l, row));
           })
      .def("difference", &Difference, py::arg("other"));
}

}  // namespace
}  // namespace kvspec

PYBIND11_MODULE(_core, m) {
  using namespace kvspec;
  m.doc() = "kvspec's core, codec, kernels and trace library (see docs/python.md)";
  BindLayerConfig(m);
  BindLayout(m);

  m.def("encode_layout", [](const Layout& layout) {
    std::string bytes;
    Check(EncodeLayout(layout, &bytes));
    return py::bytes(bytes);
  });
  m.def("decode_layout", [](const py::bytes& data) {
    std::unique_ptr<Layout> out;
    Check(DecodeLayout(std::string(data), &out));
    return out;
  });

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
  // The most bytes of trace text the parser takes (kvspec.program.load reads
  // a .trace file no further).
  m.attr("MAX_TRACE_BYTES") = kvspec::trace::kMaxTraceBytes;

  m.def("parse_trace", &ParseTraceJson, py::arg("text"), py::arg("file") = "<string>");
  m.def("run_trace", &RunTrace, py::arg("text"), py::arg("name") = "<string>",
        py::arg("values") = false, py::arg("emit") = false, py::arg("reference") = false);

  py::class_<TraceContents>(m, "TraceContents").def(py::init<>());
  m.def("trace_forward", &TraceForward, py::arg("layout"), py::arg("contents"),
        py::arg("columns"), py::arg("left") = py::none(), py::arg("right") = py::none(),
        py::arg("ids") = py::none(), py::arg("decode") = false);
}
