// kvspec._core's LayerConfig and Layout: construction, numpy forwards,
// the lifecycle, observation of stored state, the codec.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvspec/base/layer_config.h"
#include "kvspec/core/codec/codec.h"
#include "kvspec/core/layout.h"
#include "kvspec/kernels/quantize.h"
#include "py_common.h"

namespace kvspec {
namespace bindings {
namespace {

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
        // The stored values as fp32 (exact for every storage type).
        LoadKvRow(v.type(), v.KeyBytes(r, h, s), v.dim, k.mutable_data(r, h, s, 0));
        LoadKvRow(v.type(), v.ValueBytes(r, h, s), v.dim, val.mutable_data(r, h, s, 0));
      }
    }
    std::memcpy(slot_pos.mutable_data(r, 0), v.slot_pos + r * v.slot_stride,
                static_cast<size_t>(slots) * sizeof(int32_t));
  }
  d["k"] = k;
  d["v"] = val;
  d["type"] = KvTypeName(v.type());
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
          same = va.type() == vb.type() &&
                 std::memcmp(va.KeyBytes(r, h, xa), vb.KeyBytes(r, h, xb), va.RowBytes()) == 0 &&
                 std::memcmp(va.ValueBytes(r, h, xa), vb.ValueBytes(r, h, xb), va.RowBytes()) == 0;
        }
        if (!same) return where + " position " + std::to_string(pa) + " differs";
      }
    }
  }
  return "";
}

std::unique_ptr<Layout> CreateLayout(int rows, const std::vector<LayerConfig>& layers) {
  std::unique_ptr<Layout> layout;
  Check(Layout::Create(rows, layers, &layout));
  return layout;
}

}  // namespace

void BindLayerConfig(py::module_& m) {
  py::class_<LayerConfig>(m, "LayerConfig")
      .def(py::init([](const std::string& name, const std::string& kind, int heads, int q_heads,
                       int dim, int32_t window, int32_t capacity, int kheads, int dk, int dv,
                       int conv, const std::string& kv) {
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
             c.kv = KvTypeFromName(kv);
             return c;
           }),
           py::arg("name"), py::arg("kind") = "kv", py::arg("heads") = 1, py::arg("q_heads") = 0,
           py::arg("dim") = 4, py::arg("window") = 0, py::arg("capacity") = 0,
           py::arg("kheads") = 0, py::arg("dk") = 4, py::arg("dv") = 4, py::arg("conv") = 4,
           py::arg("kv") = "f32")
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
      .def_property(
          "kv", [](const LayerConfig& c) { return std::string(KvTypeName(c.kv)); },
          [](LayerConfig& c, const std::string& t) { c.kv = KvTypeFromName(t); })
      .def("query_heads", &LayerConfig::QueryHeads)
      .def("key_heads", &LayerConfig::KeyHeads)
      .def("ring_capacity", &LayerConfig::RingCapacity)
      .def("ssm_channels", &LayerConfig::SsmChannels)
      .def("__repr__", [](const LayerConfig& c) {
        return "LayerConfig(name='" + c.name + "', kind='" + std::string(KindName(c.kind)) +
               "', heads=" + std::to_string(c.heads) + ", dim=" + std::to_string(c.dim) +
               ", window=" + std::to_string(c.window) + ", kv='" + KvTypeName(c.kv) + "')";
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
}

}  // namespace bindings
}  // namespace kvspec
