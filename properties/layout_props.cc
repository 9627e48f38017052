// Stateful properties of KV caches driven through a Layout, against the
// trace model (testing/trace_model.h: docs/TRACE.md's rules, the same
// model the fuzz targets and the values oracle use).
//
// Every command is one trace statement, applied to the model as such; the
// model decides refusals, visible sets, positions, trimmability and kinds.
// A shrunk failure prints as a trace
// (the RC_LOG header plus the commands) and RapidCheck prints the
// RC_PARAMS="reproduce=..." string that reruns exactly that case.
//
// After every forward, for every attention layer, row and real query:
// - window causality: the slots the mask admits hold exactly the model's
//   visible set (tags recovered from the stored bytes, not bookkeeping);
// - padding invisibility, neighbour independence and chunking invariance:
//   the output equals, bit for bit, attention over a fresh single-row cache
//   holding only that row's real tokens written as one window (pad columns
//   of the layout hold NaN, infinities and garbage);
// - the Highway kernel agrees with the scalar reference within
//   kAttentionTolerance.
// Refused operations must be refused exactly when the model says so and
// leave the layout bit-identical.
//
// KvOperationSequencesMatchTheModel records every case as a trace with the
// model's expectations (Cmd::Record); a shrunk failure is written to
// corpus/regressions/properties/ (properties/regression_writer.h), which
// ctest replays first. One run in eight starts from the operations of a
// trace of corpus/traces/ or corpus/regressions/ (see "Seeds" below).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>
#include <rapidcheck/state.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kvspec/kernels/attention.h"
#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/mask_builder.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/trace/program.h"
#include "kvspec/runner/runner.h"
#include "kvspec/trace/values.h"
#include "kvspec/properties/regression_writer.h"
#include "kvspec/testing/generators.h"
#include "kvspec/testing/rc_choices.h"
#include "kvspec/testing/shape_generators.h"
#include "kvspec/testing/trace_model.h"

namespace kvspec {
namespace trace {
// RapidCheck prints a recovered tag as the trace does.
void showValue(const Tag& t, std::ostream& os) { os << t.ToString(); }
}  // namespace trace

namespace {

using testing::JoinInts;
using trace::ContentIndex;
using trace::SeenItem;
using trace::Tag;

// ---------------------------------------------------------------------------
// Configuration and token contents.

struct LayerShape {
  int heads = 1;
  int group = 1;  // query heads per KV head
  int dim = 4;
  int32_t window = kNoWindow;
  int32_t capacity = 0;  // > 0: a rotating ring of this capacity (>= window)
  bool recurrent = false;  // an ssm layer: heads = value heads, group = heads / kheads
  int dk = 4, dv = 4, conv = 4;
  KvType kv = KvType::kF32;  // an attention layer's storage type
  int QueryHeads() const { return heads * group; }
  bool ring() const { return capacity > 0; }
  // The shape of a declared layer (testing::MixedLayers).
  static LayerShape Of(const LayerConfig& layer) {
    LayerShape s;
    s.recurrent = layer.kind == CacheKind::kSsm;
    s.heads = layer.heads;
    s.group = s.recurrent ? layer.heads / layer.KeyHeads() : layer.QueryHeads() / layer.heads;
    s.dim = layer.dim;
    s.window = layer.window;
    s.capacity = layer.capacity;
    s.kv = layer.kv;
    if (s.recurrent) {
      s.dk = layer.dk;
      s.dv = layer.dv;
      s.conv = layer.conv;
    }
    return s;
  }
  SsmShape Ssm() const {
    SsmShape s;
    s.value_heads = heads;
    s.key_heads = heads / group;
    s.dk = dk;
    s.dv = dv;
    s.conv = conv;
    return s;
  }
};

struct Config {
  int rows = 1;
  std::vector<LayerShape> layers;

  // The layers as a trace declares them (names l0, l1, ..).
  std::vector<LayerConfig> Layers() const {
    std::vector<LayerConfig> out;
    for (size_t l = 0; l < layers.size(); ++l) {
      const LayerShape& shape = layers[l];
      LayerConfig lc;
      lc.name = "l" + std::to_string(l);
      lc.kind = shape.recurrent ? CacheKind::kSsm
                                : shape.ring() ? CacheKind::kRotating : CacheKind::kKv;
      lc.heads = shape.heads;
      lc.q_heads = shape.QueryHeads();
      lc.dim = shape.dim;
      lc.window = shape.window;
      lc.capacity = shape.capacity;
      lc.kv = shape.kv;
      if (shape.recurrent) {
        lc.kheads = shape.heads / shape.group;
        lc.dk = shape.dk;
        lc.dv = shape.dv;
        lc.conv = shape.conv;
      }
      out.push_back(lc);
    }
    return out;
  }
  std::string Header() const { return testing::TraceHeader(rows, Layers()); }
};

// RapidCheck prints a generated Config as the trace header it stands for.
void showValue(const Config& c, std::ostream& os) { os << c.Header(); }

rc::Gen<Config> GenConfig() {
  return rc::gen::exec([] {
    Config c;
    c.rows = *rc::gen::inRange(1, 5);
    testing::RcChoices choices;
    for (const LayerConfig& layer : testing::MixedLayers(choices)) {
      c.layers.push_back(LayerShape::Of(layer));
    }
    return c;
  });
}

// q (query heads), k and v (KV heads) of token (layer, id, pos).
void TokenContent(const LayerShape& s, int layer, int32_t id, int32_t pos, float* q,
                  float* k, float* v) {
  ContentIndex::AttentionToken(layer, id, pos, s.QueryHeads(), s.heads, s.dim, q, k, v);
}

// Garbage for pad columns: NaN, infinities, huge values, random bits.
float Garbage(uint64_t seed, size_t i) {
  const uint64_t u = Mix(seed + i * 0x9E3779B97F4A7C15ull);
  switch (u % 5) {
    case 0: return std::numeric_limits<float>::quiet_NaN();
    case 1: return (u & 8) ? std::numeric_limits<float>::infinity()
                           : -std::numeric_limits<float>::infinity();
    case 2: return 3.0e38f;
    case 3: return ContentIndex::PadValue();
    default: {
      const uint32_t bits = static_cast<uint32_t>(u >> 32);
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
  }
}

// ---------------------------------------------------------------------------
// The model.

// The rules (testing/trace_model.h) on the generated configuration: what
// every command must do is what the trace model says its statement does.
struct Model {
  Config cfg;
  testing::TraceModel rules;

  explicit Model(const Config& c) : cfg(c), rules(c.rows, c.Layers(), /*print=*/false) {}

  int32_t Next(int r) const { return Positions()[static_cast<size_t>(r)]; }
  std::vector<int32_t> Positions() const { return rules.Positions(); }
  // Row r's real tokens, in order.
  std::vector<SeenItem> Tokens(int r) const { return rules.Tokens(r); }
};

struct Sut {
  Config cfg;
  std::unique_ptr<Layout> layout;
  ContentIndex index;
};

// ---------------------------------------------------------------------------
// Checks after a forward.

// Attention over a fresh single-row cache holding only row r's real tokens
// (written as one window), for the queries at `positions`.
std::vector<float> CleanOutputs(const Model& m, int layer, int r,
                                const std::vector<int32_t>& positions) {
  if (positions.empty()) return {};
  const LayerShape& s = m.cfg.layers[layer];
  const std::vector<SeenItem> tokens = m.Tokens(r);
  const size_t hd = static_cast<size_t>(s.heads) * s.dim;
  const size_t qd = static_cast<size_t>(s.QueryHeads()) * s.dim;
  const size_t n = tokens.size();
  std::vector<float> q(n * qd), k(n * hd), v(n * hd);
  for (size_t j = 0; j < n; ++j) {
    TokenContent(s, layer, tokens[j].id, tokens[j].pos, &q[j * qd], &k[j * hd], &v[j * hd]);
  }
  KvCache clean(s.heads, s.dim, s.window, s.kv);
  RC_ASSERT(clean.Append(ForwardColumns::Dense(1, static_cast<int32_t>(n)), k.data(), v.data())
                .ok());
  const KvView view = clean.View();
  Mask mask;
  mask.window = s.window;
  mask.rows = 1;
  mask.queries = static_cast<int32_t>(positions.size());
  mask.slot_pos = view.slot_pos;
  mask.slot_stride = view.slot_stride;
  mask.slots = view.slots;
  std::vector<float> qs;
  for (int32_t p : positions) {
    mask.query_pos.push_back(p);
    mask.hi.push_back(p);
    mask.lo.push_back(s.window == kNoWindow ? 0 : std::max(0, p - s.window + 1));
    qs.insert(qs.end(), &q[static_cast<size_t>(p) * qd], &q[static_cast<size_t>(p) * qd] + qd);
  }
  std::vector<float> out(positions.size() * qd);
  Attend(qs.data(), s.QueryHeads(), view, mask, out.data());
  return out;
}

bool SameBits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// A fresh single-row recurrent cache fed row r's real tokens as one window:
// returns every token's y and, when `state` is given, the cache.
std::vector<float> CleanRecurrent(const Model& m, int layer, int r,
                                  std::unique_ptr<SsmCache>* state) {
  const SsmShape shape = m.cfg.layers[layer].Ssm();
  const std::vector<SeenItem> tokens = m.Tokens(r);
  const size_t C = shape.Channels(), hv = static_cast<size_t>(shape.value_heads);
  const size_t n = tokens.size();
  auto cache = std::make_unique<SsmCache>(shape);
  std::vector<float> x(n * C), g(n * hv), b(n * hv), y(n * hv * shape.dv);
  for (size_t j = 0; j < n; ++j) {
    ContentIndex::RecurrentToken(layer, tokens[j].id, tokens[j].pos, C, hv, &x[j * C],
                                 &g[j * hv], &b[j * hv]);
  }
  if (n > 0) {
    const std::vector<float> w = ContentIndex::ConvWeights(layer, C, shape.conv);
    const SsmIO io{w.data(), x.data(), g.data(), b.data(), y.data()};
    RC_ASSERT(cache->Forward(ForwardColumns::Dense(1, static_cast<int32_t>(n)), io).ok());
  }
  if (state) *state = std::move(cache);
  return y;
}

// Every recurrent layer's rows hold, byte for byte, the state of a clean
// run over only their real tokens.
void CheckRecurrent(const Model& m, const Layout& layout) {
  for (size_t l = 0; l < m.cfg.layers.size(); ++l) {
    if (!m.cfg.layers[l].recurrent) continue;
    const SsmCacheBase* ssm = layout.recurrent(l);
    RC_ASSERT(ssm != nullptr);
    const SsmShape shape = m.cfg.layers[l].Ssm();
    for (int r = 0; r < m.cfg.rows; ++r) {
      std::unique_ptr<SsmCache> clean;
      CleanRecurrent(m, static_cast<int>(l), r, &clean);
      RC_ASSERT(std::memcmp(ssm->ConvState(r), clean->ConvState(0),
                            shape.ConvFloats() * sizeof(float)) == 0);
      RC_ASSERT(std::memcmp(ssm->RecurrentState(r), clean->RecurrentState(0),
                            shape.RecurrentFloats() * sizeof(float)) == 0);
    }
  }
}

// isTrimmable() and the kind string of every layer, as the model says (a
// ring is trimmable until it has wrapped).
void CheckTrimmable(const Model& m, const Layout& layout) {
  for (size_t l = 0; l < m.cfg.layers.size(); ++l) {
    RC_ASSERT(layout.cache(l).isTrimmable() == m.rules.Trimmable(static_cast<int>(l)));
    RC_ASSERT(layout.cache(l).kind() == m.rules.KindString(static_cast<int>(l)));
  }
}

// ---------------------------------------------------------------------------
// Commands.

using Command = rc::state::Command<Model, Sut>;

std::string Sees(const std::vector<SeenItem>& items) {
  std::string s;
  for (const SeenItem& e : items) {
    s += " " + std::to_string(e.pos);
    if (e.id != e.pos) s += ":" + std::to_string(e.id);
  }
  return s;
}

// A command that also records itself, as the trace statement it stands for
// and what the model says of it, in the regression recorder
// (properties/regression_writer.h): a shrunk failure is written as a trace
// that fails on the build that failed and passes on a correct one.
struct Cmd : Command {
  // The trace statement this command is.
  virtual trace::Statement Statement() const = 0;
  virtual bool IsForward() const { return false; }
  // Whether the rules refuse it; a refused command changes nothing.
  bool Refused(const Model& m) const { return m.rules.Refuses(Statement()); }
  void apply(Model& m) const override { m.rules.Apply(Statement()); }
  void show(std::ostream& os) const override { os << testing::StatementText(Statement()); }
  // Expectations that only this kind of command states (a forward: what
  // every real query sees).
  virtual void Expectations(const Model& before, const Model& after,
                            regress::Recorder& rec) const {}

  // Called first thing in run(), before anything can fail.
  void Record(const Model& m) const {
    regress::Recorder& rec = regress::Recorder::Get();
    std::ostringstream line;
    show(line);
    if (Refused(m)) {
      rec.Statement("expect error " + line.str());
      return;
    }
    rec.Statement(line.str(), IsForward());
    Model after = m;
    apply(after);
    Expectations(m, after, rec);
    rec.Expect("expect positions " + JoinInts(after.Positions()));
    for (size_t l = 0; l < m.cfg.layers.size(); ++l) {
      const bool trimmable = after.rules.Trimmable(static_cast<int>(l));
      rec.Expect("expect trimmable l" + std::to_string(l) + (trimmable ? " yes" : " no"));
    }
  }
};

// A forward: `window L left= right= ids=` or `decode ids=`.
struct ForwardCmd : Cmd {
  bool decode = false;
  ForwardColumns cols;
  std::vector<std::vector<int32_t>> ids;
  uint64_t pad_seed = 0;

  ForwardCmd() = default;
  ForwardCmd(const Model& m, bool is_decode) : decode(is_decode) {
    const int rows = m.cfg.rows;
    const int32_t L = decode ? 1 : *rc::gen::inRange<int32_t>(1, 7);
    cols = ForwardColumns::Dense(rows, L, decode);
    const bool explicit_ids = *rc::gen::inRange(0, 3) == 0;
    for (int r = 0; r < rows && !decode; ++r) {
      // Left padding mostly where allowed; sometimes where it is refused.
      const bool may_left = m.Next(r) == 0 || *rc::gen::inRange(0, 12) == 0;
      cols.left[r] = may_left ? *rc::gen::inRange<int32_t>(0, L + 1) : 0;
      cols.right[r] = *rc::gen::inRange<int32_t>(0, L - cols.left[r] + 1);
    }
    ids.resize(static_cast<size_t>(rows));
    const std::vector<int32_t> next = m.Positions();
    for (int r = 0; r < rows; ++r) {
      for (int32_t j = 0; j < cols.Real(r); ++j) {
        ids[r].push_back(explicit_ids ? *rc::gen::inRange<int32_t>(0, 1000) : next[r] + j);
      }
    }
    pad_seed = *rc::gen::arbitrary<uint64_t>();
  }

  trace::Statement Statement() const override {
    if (decode) {
      trace::DecodeOp op;
      op.has_ids = true;
      op.ids = ids;
      return testing::StatementOf(op);
    }
    trace::WindowOp op;
    op.columns = cols.columns;
    op.has_left = op.has_right = op.has_ids = true;
    op.left = cols.left;
    op.right = cols.right;
    op.ids = ids;
    return testing::StatementOf(op);
  }

  bool IsForward() const override { return true; }
  // What every real query of every attention layer sees (window causality).
  void Expectations(const Model& before, const Model& after,
                    regress::Recorder& rec) const override {
    for (size_t l = 0; l < after.cfg.layers.size(); ++l) {
      if (after.cfg.layers[l].recurrent) continue;
      for (int r = 0; r < after.cfg.rows; ++r) {
        for (int32_t j = 0; j < cols.Real(r); ++j) {
          const int32_t p = before.Next(r) + j;
          const std::vector<SeenItem>* seen = after.rules.Sees(static_cast<int>(l), r, p);
          RC_ASSERT(seen != nullptr);
          rec.Expect("expect sees l" + std::to_string(l) + " r" + std::to_string(r) + " p" +
                     std::to_string(p) + ":" + Sees(*seen));
        }
      }
    }
  }

  // Layer l's inputs of this forward: every column's q (qn floats), k and
  // v (kvn floats each) hold garbage, then token(column, row, j) writes the
  // real token j of each row.
  template <typename Token>
  void FillInputs(size_t l, size_t qn, size_t kvn, std::vector<float>* q, std::vector<float>* k,
                  std::vector<float>* v, const Token& token) const {
    const int rows = static_cast<int>(cols.left.size());
    const size_t columns = static_cast<size_t>(rows) * static_cast<size_t>(cols.columns);
    q->resize(columns * qn);
    k->resize(columns * kvn);
    v->resize(columns * kvn);
    for (size_t i = 0; i < q->size(); ++i) (*q)[i] = Garbage(pad_seed ^ (l << 8), i);
    for (size_t i = 0; i < k->size(); ++i) {
      (*k)[i] = Garbage(pad_seed ^ (l << 8) ^ 1, i);
      (*v)[i] = Garbage(pad_seed ^ (l << 8) ^ 2, i);
    }
    for (int r = 0; r < rows; ++r) {
      for (int32_t j = 0; j < cols.Real(r); ++j) {
        token(static_cast<size_t>(r) * static_cast<size_t>(cols.columns) +
                  static_cast<size_t>(cols.left[r] + j),
              r, j);
      }
    }
  }

  void run(const Model& m, Sut& sut) const override {
    Record(m);
    Layout& layout = *sut.layout;
    const int rows = m.cfg.rows;
    const size_t L = static_cast<size_t>(cols.columns);
    const std::vector<int32_t> next = m.Positions();
    const size_t nl = m.cfg.layers.size();
    std::vector<std::vector<float>> q(nl), k(nl), v(nl), o(nl), ref(nl);
    std::vector<std::vector<float>> weights(nl);
    std::vector<AttentionIO> io(nl);
    for (size_t l = 0; l < nl; ++l) {
      const LayerShape& s = m.cfg.layers[l];
      if (s.recurrent) {
        // x -> q, gate -> k, beta -> v; y -> o. Pads hold garbage.
        const SsmShape shape = s.Ssm();
        const size_t C = shape.Channels(), hv = static_cast<size_t>(shape.value_heads);
        FillInputs(l, C, hv, &q[l], &k[l], &v[l], [&](size_t c, int r, int32_t j) {
          ContentIndex::RecurrentToken(static_cast<int>(l), ids[r][j], next[r] + j, C, hv,
                                       &q[l][c * C], &k[l][c * hv], &v[l][c * hv]);
        });
        weights[l] = ContentIndex::ConvWeights(static_cast<int>(l), C, shape.conv);
        o[l].assign(rows * L * hv * shape.dv, 0.0f);
        io[l] = AttentionIO(SsmIO{weights[l].data(), q[l].data(), k[l].data(), v[l].data(),
                                  o[l].data()});
        continue;
      }
      const size_t hd = static_cast<size_t>(s.heads) * s.dim;
      const size_t qd = static_cast<size_t>(s.QueryHeads()) * s.dim;
      FillInputs(l, qd, hd, &q[l], &k[l], &v[l], [&](size_t c, int r, int32_t j) {
        TokenContent(s, static_cast<int>(l), ids[r][j], next[r] + j, &q[l][c * qd],
                     &k[l][c * hd], &v[l][c * hd]);
      });
      o[l].assign(rows * L * qd, 0.0f);
      io[l] = AttentionIO{q[l].data(), k[l].data(), v[l].data(), o[l].data()};
    }
    const uint64_t before = layout.StateHash();
    const Status s = layout.Forward(cols, io);
    RC_ASSERT(s.ok() == !Refused(m));
    if (!s.ok()) {
      RC_ASSERT(layout.StateHash() == before);
      return;
    }
    Model after = m;
    apply(after);
    RC_ASSERT(layout.positions() == after.Positions());
    CheckTrimmable(after, layout);
    CheckRecurrent(after, layout);
    for (size_t l = 0; l < nl; ++l) {
      const LayerShape& shape = m.cfg.layers[l];
      if (shape.recurrent) {
        // Each real token's y equals a clean single-row run's, bit for bit.
        const size_t yf = static_cast<size_t>(shape.heads) * shape.dv;
        for (int r = 0; r < rows; ++r) {
          const std::vector<float> clean = CleanRecurrent(after, static_cast<int>(l), r, nullptr);
          for (int32_t j = 0; j < cols.Real(r); ++j) {
            const size_t col = r * L + static_cast<size_t>(cols.left[r] + j);
            const size_t token = static_cast<size_t>(next[r] + j);
            RC_ASSERT(SameBits(&o[l][col * yf], &clean[token * yf], yf));
          }
        }
        continue;
      }
      const size_t hd = static_cast<size_t>(shape.heads) * shape.dim;
      const size_t qd = static_cast<size_t>(shape.QueryHeads()) * shape.dim;
      for (int r = 0; r < rows; ++r) {
        for (int32_t j = 0; j < cols.Real(r); ++j) {
          const size_t c = r * L + static_cast<size_t>(cols.left[r] + j);
          sut.index.Remember(static_cast<int>(l), ids[r][j], next[r] + j, &k[l][c * hd],
                             &v[l][c * hd], hd, shape.kv, shape.dim);
        }
      }
      const Mask* mask = layout.LastMask(l);
      RC_ASSERT(mask != nullptr);
      const KvView view = layout.attention(l)->View();
      // Layers with the same window and ring capacity share one mask and
      // stay in lockstep (same slots, same phase).
      for (size_t l2 = 0; l2 < l; ++l2) {
        const LayerShape& s2 = m.cfg.layers[l2];
        if (s2.recurrent || s2.window != shape.window || s2.capacity != shape.capacity) continue;
        RC_ASSERT(layout.LastMask(l2) == mask);
        const KvView other = layout.attention(l2)->View();
        RC_ASSERT(other.slots == view.slots);
        RC_ASSERT(other.first_slot == view.first_slot);
        for (int r = 0; r < rows; ++r) {
          RC_ASSERT(std::memcmp(other.slot_pos + r * other.slot_stride,
                                view.slot_pos + r * view.slot_stride,
                                sizeof(int32_t) * static_cast<size_t>(view.slots)) == 0);
        }
      }
      ref[l].assign(o[l].size(), 0.0f);
      AttendReference(q[l].data(), shape.QueryHeads(), view, *mask, ref[l].data());
      for (int r = 0; r < rows; ++r) {
        std::vector<int32_t> positions;
        for (int32_t j = 0; j < cols.Real(r); ++j) positions.push_back(next[r] + j);
        const std::vector<float> clean = CleanOutputs(after, static_cast<int>(l), r, positions);
        for (int32_t j = 0; j < cols.Real(r); ++j) {
          const int32_t col = cols.left[r] + j;
          const int32_t p = next[r] + j;
          // Window causality, from the bytes in the admitted slots.
          std::vector<Tag> seen, want;
          for (int32_t slot = 0; slot < mask->slots; ++slot) {
            if (mask->Admits(r, col, slot)) {
              seen.push_back(sut.index.Recover(static_cast<int>(l), view, r, slot));
            }
          }
          const std::vector<SeenItem>* visible = after.rules.Sees(static_cast<int>(l), r, p);
          RC_ASSERT(visible != nullptr);
          for (const SeenItem& e : *visible) want.push_back(Tag{Tag::kToken, e.pos, e.id});
          std::sort(seen.begin(), seen.end());
          RC_ASSERT(seen == want);
          // Bit-identical to a clean single-row cache.
          const float* got = &o[l][(r * L + static_cast<size_t>(col)) * qd];
          RC_ASSERT(SameBits(got, &clean[static_cast<size_t>(j) * qd], qd));
          // Highway against the scalar reference.
          const float* want_ref = &ref[l][(r * L + static_cast<size_t>(col)) * qd];
          for (size_t i = 0; i < qd; ++i) {
            RC_ASSERT(std::isfinite(got[i]));
            RC_ASSERT(std::fabs(got[i] - want_ref[i]) <=
                      kAttentionTolerance * (1.0f + std::fabs(want_ref[i])));
          }
        }
      }
    }
  }

};

struct WindowCmd : ForwardCmd {
  explicit WindowCmd(const Model& m) : ForwardCmd(m, false) {}
};
struct DecodeCmd : ForwardCmd {
  explicit DecodeCmd(const Model& m) : ForwardCmd(m, true) {}
};

struct TrimCmd : Cmd {
  int32_t n = 0;
  bool bypass = false;
  TrimCmd() = default;
  explicit TrimCmd(const Model& m) {
    const std::vector<int32_t> p = m.Positions();
    const int32_t most = *std::max_element(p.begin(), p.end());
    n = *rc::gen::inRange<int32_t>(0, most + 2);
    bypass = *rc::gen::arbitrary<bool>();
  }
  trace::Statement Statement() const override { return testing::StatementOf(trace::TrimOp{n, bypass}); }
  void run(const Model& m, Sut& sut) const override {
    Record(m);
    const uint64_t before = sut.layout->StateHash();
    const Status s = sut.layout->Trim(n, bypass);
    RC_ASSERT(s.ok() == !Refused(m));
    if (!s.ok()) {
      RC_ASSERT(!s.message().empty());
      RC_ASSERT(sut.layout->StateHash() == before);
    }
    Model after = m;
    apply(after);
    RC_ASSERT(sut.layout->positions() == after.Positions());
    CheckTrimmable(after, *sut.layout);
  }
};

struct ArmCmd : Cmd {
  ArmCmd() = default;
  explicit ArmCmd(const Model&) {}
  trace::Statement Statement() const override { return testing::StatementOf(trace::ArmOp{}); }
  void run(const Model& m, Sut& sut) const override {
    Record(m);
    const uint64_t before = sut.layout->StateHash();
    const Status s = sut.layout->Arm();
    RC_ASSERT(s.ok() == !Refused(m));
    if (!s.ok()) RC_ASSERT(sut.layout->StateHash() == before);
  }
};

struct AcceptCmd : Cmd {
  std::vector<int32_t> keep;
  AcceptCmd() = default;
  explicit AcceptCmd(const Model& m) {
    const bool per_row = m.cfg.rows > 1 && *rc::gen::arbitrary<bool>();
    const int count = per_row ? m.cfg.rows : 1;
    for (int r = 0; r < count; ++r) {
      const int32_t real = m.rules.verified() ? m.rules.VerifyReal()[static_cast<size_t>(r)] : 2;
      keep.push_back(*rc::gen::inRange<int32_t>(0, real + 2));
    }
  }
  trace::Statement Statement() const override { return testing::StatementOf(trace::AcceptOp{keep}); }
  void run(const Model& m, Sut& sut) const override {
    Record(m);
    const uint64_t before = sut.layout->StateHash();
    const Status s = sut.layout->Accept(keep);
    RC_ASSERT(s.ok() == !Refused(m));
    if (!s.ok()) RC_ASSERT(sut.layout->StateHash() == before);
    Model after = m;
    apply(after);
    RC_ASSERT(sut.layout->positions() == after.Positions());
    RC_ASSERT(sut.layout->armed() == after.rules.armed());
    CheckTrimmable(after, *sut.layout);
    CheckRecurrent(after, *sut.layout);
  }
};

std::unique_ptr<Layout> BuildLayout(const Config& c) {
  const std::vector<LayerConfig> layers = c.Layers();
  std::unique_ptr<Layout> layout;
  RC_ASSERT(Layout::Create(c.rows, layers, &layout).ok());
  return layout;
}

// ---------------------------------------------------------------------------
// Seeds: the operation sequences of the repository's traces.
//
// One run in eight starts from a trace of corpus/traces/ (and its
// subfolders) or corpus/regressions/ (recursively): its header becomes the
// configuration and its first N operations (N generated, shrinking towards
// 1) run as the property's own commands, checked like any other, before the
// random commands continue. Statements the commands cover: `window`,
// `decode`, `trim`, `arm`, `accept`, and `expect error` of one of them
// (the model decides the refusal); other expectations are skipped; the
// prefix ends at the first other operation (`fork`, `use`, `join`,
// `filter`, `extract`, `reload`) or at a statement the commands cannot
// state (a list of the wrong length, left + right > L, an id count that is
// not the real count). Traces that do not parse, or whose header is larger
// than the property's usual shapes (see SeedConfig), are not seeds. The seed
// list is read once per process, sorted by path, so a reproduce string of a
// seeded run holds as long as those folders do not change.

struct Seed {
  std::string file;  // relative to the source tree
  Config cfg;
  std::vector<trace::Statement> ops;
  uint64_t pad_seed = 0;
};

bool SeedConfig(const trace::Program& p, Config* cfg) {
  if (p.rows > 8 || p.layers.size() > 6) return false;
  cfg->rows = p.rows;
  cfg->layers.clear();
  for (const LayerConfig& d : p.layers) {
    LayerShape s;
    s.heads = d.heads;
    if (d.kind == CacheKind::kSsm) {
      if (d.heads > 8 || d.dk > 32 || d.dv > 32 || d.conv > 8 || d.kheads < 1) return false;
      s.recurrent = true;
      s.group = d.heads / d.kheads;
      s.dk = d.dk;
      s.dv = d.dv;
      s.conv = d.conv;
    } else {
      if (d.heads > 8 || d.dim > 64 || d.window > 256 || d.capacity > 256) return false;
      s.dim = d.dim;
      s.window = d.window > 0 ? d.window : kNoWindow;
      if (d.kind == CacheKind::kRotating) s.capacity = d.capacity;
    }
    cfg->layers.push_back(s);
  }
  return !cfg->layers.empty();
}

bool SeedOp(trace::Op op) {
  return op == trace::Op::kWindow || op == trace::Op::kDecode || op == trace::Op::kTrim ||
         op == trace::Op::kArm || op == trace::Op::kAccept;
}

const std::vector<Seed>& Seeds() {
  static const std::vector<Seed> seeds = [] {
    namespace fs = std::filesystem;
    const fs::path root(KVSPEC_SOURCE_DIR);
    std::vector<fs::path> files;
    for (const char* dir : {"corpus/traces", "corpus/regressions"}) {
      std::error_code ec;
      for (fs::recursive_directory_iterator it(root / dir, ec), end; !ec && it != end;
           it.increment(ec)) {
        if (it->is_regular_file() && it->path().extension() == ".trace") {
          files.push_back(it->path());
        }
      }
    }
    std::sort(files.begin(), files.end());
    std::vector<Seed> out;
    for (const fs::path& path : files) {
      std::ifstream f(path, std::ios::binary);
      std::ostringstream text;
      text << f.rdbuf();
      if (text.str().size() > (1u << 20)) continue;
      trace::Program program;
      trace::SyntaxError error;
      if (!ParseTrace(text.str(), path.string(), &program, &error)) continue;
      Seed seed;
      seed.file = fs::relative(path, root).string();
      if (!SeedConfig(program, &seed.cfg)) continue;
      int64_t columns = 0;
      for (const trace::Statement& st : program.body) {
        const trace::Statement* op = &st;
        if (st.op() == trace::Op::kExpectError && st.Get<trace::ExpectError>().inner) {
          op = st.Get<trace::ExpectError>().inner.get();
        } else if (st.op() >= trace::Op::kExpectSees) {
          continue;
        }
        if (!SeedOp(op->op())) break;
        columns += op->op() == trace::Op::kWindow ? op->Get<trace::WindowOp>().columns : 1;
        if (columns > 512) break;
        seed.ops.push_back(st);
      }
      if (seed.ops.empty()) continue;
      for (char c : seed.file) seed.pad_seed = Mix(seed.pad_seed ^ static_cast<uint8_t>(c));
      out.push_back(std::move(seed));
    }
    return out;
  }();
  return seeds;
}

// The command trace statement `st` stands for, run on model `m`; null when
// the commands cannot state it.
std::unique_ptr<Cmd> SeedCommand(const trace::Statement& st, const Model& m, uint64_t pad_seed) {
  const trace::Statement& statement =
      st.op() == trace::Op::kExpectError ? *st.Get<trace::ExpectError>().inner : st;
  const int rows = m.cfg.rows;
  switch (statement.op()) {
    case trace::Op::kWindow:
    case trace::Op::kDecode: {
      auto c = std::make_unique<ForwardCmd>();
      c->decode = statement.op() == trace::Op::kDecode;
      const trace::WindowOp s = c->decode ? statement.Get<trace::DecodeOp>().AsWindow()
                                          : statement.Get<trace::WindowOp>();
      c->cols = ForwardColumns::Dense(rows, s.columns, c->decode);
      if (s.has_left) {
        if (static_cast<int>(s.left.size()) != rows) return nullptr;
        c->cols.left = s.left;
      }
      if (s.has_right) {
        if (static_cast<int>(s.right.size()) != rows) return nullptr;
        c->cols.right = s.right;
      }
      for (int r = 0; r < rows; ++r) {
        if (c->cols.left[r] + c->cols.right[r] > s.columns) return nullptr;
      }
      if (s.has_ids && static_cast<int>(s.ids.size()) != rows) return nullptr;
      c->ids.resize(static_cast<size_t>(rows));
      for (int r = 0; r < rows; ++r) {
        const int32_t real = c->cols.Real(r);
        if (s.has_ids) {
          if (static_cast<int32_t>(s.ids[r].size()) != real) return nullptr;
          c->ids[r] = s.ids[r];
        } else {
          for (int32_t j = 0; j < real; ++j) c->ids[r].push_back(m.Next(r) + j);
        }
      }
      c->pad_seed = pad_seed;
      return c;
    }
    case trace::Op::kTrim: {
      const trace::TrimOp& s = statement.Get<trace::TrimOp>();
      auto c = std::make_unique<TrimCmd>();
      c->n = s.count;
      c->bypass = s.bypass;
      return c;
    }
    case trace::Op::kArm:
      return std::make_unique<ArmCmd>();
    case trace::Op::kAccept: {
      const trace::AcceptOp& s = statement.Get<trace::AcceptOp>();
      if (s.keep.size() != 1 && static_cast<int>(s.keep.size()) != rows) return nullptr;
      auto c = std::make_unique<AcceptCmd>();
      c->keep = s.keep;
      return c;
    }
    default:
      return nullptr;
  }
}

// Runs on every Highway target this CPU has (test names end in the target).
class LayoutTargets : public ::testing::TestWithParam<int64_t> {};

KVSPEC_RECORDED_PROP_P(LayoutTargets, KvOperationSequencesMatchTheModel) {
  const std::vector<Seed>& seeds = Seeds();
  const Seed* seed = nullptr;
  size_t prefix = 0;
  // Uniform whatever the size; shrinks towards an unseeded run.
  if (!seeds.empty() && *rc::gen::resize(100, rc::gen::inRange(0, 8)) == 7) {
    seed = &seeds[*rc::gen::resize(100, rc::gen::inRange<size_t>(0, seeds.size()))];
    prefix = *rc::gen::resize(100, rc::gen::inRange<size_t>(1, seed->ops.size() + 1));
  }
  const Config cfg = seed ? seed->cfg : *GenConfig();
  std::string note;
  if (seed) {
    note = "seeded from " + seed->file + " (its first " + std::to_string(prefix) +
           " operations), then random";
    RC_LOG() << note << "\n";
  }
  RC_CLASSIFY(seed != nullptr, "seeded from a trace");
  RC_LOG() << cfg.Header();
  regress::Recorder::Get().Begin(cfg.Header(), note);
  Model model(cfg);
  Sut sut;
  sut.cfg = cfg;
  sut.layout = BuildLayout(cfg);
  for (size_t i = 0; seed && i < prefix; ++i) {
    const std::unique_ptr<Cmd> c = SeedCommand(seed->ops[i], model, seed->pad_seed + i);
    if (!c) break;
    std::ostringstream line;
    c->show(line);
    RC_LOG() << "  " << line.str() << "\n";
    c->run(model, sut);
    c->apply(model);
  }
  rc::state::check(model, sut,
                   rc::state::gen::execOneOfWithArgs<WindowCmd, WindowCmd, DecodeCmd, TrimCmd,
                                                     ArmCmd, AcceptCmd>());
}

// Every seed's whole operation prefix, run once through the commands and
// the model's checks (the seeded runs above start from a part of one).
TEST(LayoutProps, SeedTracesRunThroughTheModel) {
  const std::vector<Seed>& seeds = Seeds();
  // corpus/traces/ holds dozens of traces of attention and ssm layers.
  EXPECT_GE(seeds.size(), 10u);
  size_t statements = 0;
  for (const Seed& seed : seeds) {
    regress::Recorder::Get().Begin(seed.cfg.Header());
    Model model(seed.cfg);
    Sut sut;
    sut.cfg = seed.cfg;
    std::string at = "(layout)";
    try {
      sut.layout = BuildLayout(seed.cfg);
      for (size_t i = 0; i < seed.ops.size(); ++i) {
        const std::unique_ptr<Cmd> c = SeedCommand(seed.ops[i], model, seed.pad_seed + i);
        if (!c) break;
        at = "line " + std::to_string(seed.ops[i].line);
        c->run(model, sut);
        c->apply(model);
        ++statements;
      }
    } catch (const rc::detail::CaseResult& r) {
      ADD_FAILURE() << seed.file << " " << at << ": " << r.description;
    }
  }
  std::cout << seeds.size() << " seed traces, " << statements << " statements run\n";
}

// A prefill split into any sequence of windows gives the same visible sets
// and the same outputs, bit for bit, as one window.
KVSPEC_RECORDED_PROP_P(LayoutTargets, ChunkingInvariance) {
  Config cfg = *GenConfig();
  cfg.rows = 1;
  // Attention layers only (recurrent chunking is covered by ssm_props).
  std::vector<LayerShape> attention;
  for (const LayerShape& s : cfg.layers) {
    if (!s.recurrent) attention.push_back(s);
  }
  if (attention.empty()) attention.push_back(LayerShape());
  cfg.layers = attention;
  const int32_t total = *rc::gen::inRange<int32_t>(1, 40);
  std::vector<int32_t> chunks;
  for (int32_t left = total; left > 0;) {
    const int32_t c = *rc::gen::inRange<int32_t>(1, left + 1);
    chunks.push_back(c);
    left -= c;
  }
  RC_LOG() << cfg.Header() << "chunks " << JoinInts(chunks);
  auto run = [&](const std::vector<int32_t>& split) {
    std::unique_ptr<Layout> layout = BuildLayout(cfg);
    std::vector<std::vector<float>> outs(cfg.layers.size());
    int32_t done = 0;
    for (int32_t c : split) {
      const size_t nl = cfg.layers.size();
      std::vector<std::vector<float>> q(nl), k(nl), v(nl), o(nl);
      std::vector<AttentionIO> io(nl);
      for (size_t l = 0; l < nl; ++l) {
        const LayerShape& s = cfg.layers[l];
        const size_t hd = static_cast<size_t>(s.heads) * s.dim;
        const size_t qd = static_cast<size_t>(s.QueryHeads()) * s.dim;
        q[l].resize(c * qd);
        k[l].resize(c * hd);
        v[l].resize(c * hd);
        o[l].resize(c * qd);
        for (int32_t j = 0; j < c; ++j) {
          TokenContent(s, static_cast<int>(l), done + j, done + j, &q[l][j * qd], &k[l][j * hd],
                       &v[l][j * hd]);
        }
        io[l] = AttentionIO{q[l].data(), k[l].data(), v[l].data(), o[l].data()};
      }
      RC_ASSERT(layout->Forward(ForwardColumns::Dense(1, c), io).ok());
      for (size_t l = 0; l < nl; ++l) outs[l].insert(outs[l].end(), o[l].begin(), o[l].end());
      done += c;
    }
    return outs;
  };
  const auto chunked = run(chunks);
  const auto whole = run({total});
  for (size_t l = 0; l < cfg.layers.size(); ++l) {
    RC_ASSERT(chunked[l].size() == whole[l].size());
    RC_ASSERT(SameBits(chunked[l].data(), whole[l].data(), whole[l].size()));
  }
}

// RoPE offsets: static when rows agree, per row otherwise; a captured array
// is a value that later updates never change.
RC_GTEST_PROP(LayoutProps, RopeOffsetIsAValue, ()) {
  const int rows = *rc::gen::inRange(2, 5);
  BatchedKvCache cache(rows, 1, 2);
  std::vector<int32_t> right(static_cast<size_t>(rows));
  for (auto& r : right) r = *rc::gen::inRange<int32_t>(0, 4);
  ForwardColumns cols = ForwardColumns::Dense(rows, 4);
  cols.right = right;
  std::vector<float> kv(static_cast<size_t>(rows) * 4 * 2, 0.5f);
  RC_ASSERT(cache.Append(cols, kv.data(), kv.data()).ok());
  const RopeOffset captured = cache.ropeOffset();
  const std::vector<int32_t> copy = captured.per_row;
  bool agree = true;
  for (int r = 0; r < rows; ++r) {
    RC_ASSERT(captured.per_row[r] == 4 - right[r]);
    agree = agree && right[r] == right[0];
  }
  RC_ASSERT(captured.is_static == agree);
  if (agree) RC_ASSERT(captured.value == 4 - right[0]);
  RC_ASSERT(cache.Append(ForwardColumns::Dense(rows, 1, true), kv.data(), kv.data()).ok());
  RC_ASSERT(captured.per_row == copy);
  RC_ASSERT(cache.ropeOffset().per_row[0] == copy[0] + 1);
}

KVSPEC_FOR_EACH_TARGET(LayoutTargets);

}  // namespace
}  // namespace kvspec
