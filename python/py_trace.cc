// kvspec._core's trace library: parsing, running trace text, and the trace
// token forwards kvspec.adapters.reference drives.
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kvspec/core/layout.h"
#include "kvspec/kernels/conv1d.h"
#include "kvspec/runner/runner.h"
#include "kvspec/trace/json.h"
#include "kvspec/trace/program.h"
#include "py_common.h"

namespace kvspec {
namespace bindings {
namespace {

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
                                 before_[r] + j, &k_[l][at], &v_[l][at], hd, d.kv, d.dim);
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

}  // namespace

void BindTrace(py::module_& m) {
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

}  // namespace bindings
}  // namespace kvspec
