// The double-precision oracle of values_oracle.h. Everything here follows
// TRACE.md's "Values" section line by line; nothing is shared with core/:
// the parsed program and which tokens each query sees come from the trace
// format and the trace model (testing/trace_model.h), the numbers from here.
#include "kvspec/testing/values_oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "kvspec/base/layer_config.h"
#include "kvspec/testing/trace_model.h"
#include "kvspec/trace/program.h"

namespace kvspec::oracle {
namespace {

// ---------------------------------------------------------------------------
// The generator: mix(), streams, draws.

uint64_t MixBits(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A stream with seed s yields mix(s + i * 0x9E3779B97F4A7C15) for i = 1, 2, ...
// and each draw u becomes ((u >> 40) * 2^-24) * 2 - 1 (exact in double).
class Draws {
 public:
  explicit Draws(uint64_t seed) : seed_(seed) {}
  double Next() {
    i_ += 1;
    const uint64_t u = MixBits(seed_ + i_ * 0x9E3779B97F4A7C15ull);
    const double top24 = static_cast<double>(u >> 40);
    return top24 * std::ldexp(1.0, -24) * 2.0 - 1.0;
  }
  std::vector<double> Take(size_t n) {
    std::vector<double> out(n);
    for (size_t j = 0; j < n; ++j) out[j] = Next();
    return out;
  }

 private:
  uint64_t seed_;
  uint64_t i_ = 0;
};

uint64_t SeedOfToken(int layer, int32_t id, int32_t pos) {
  const uint64_t l = static_cast<uint64_t>(layer);
  return MixBits(MixBits(MixBits(l) ^ static_cast<uint64_t>(id)) ^ static_cast<uint64_t>(pos));
}

uint64_t SeedOfWeights(int layer) {
  return MixBits(MixBits(static_cast<uint64_t>(layer)) ^ 0xFFFFFFFFFFFFFFFFull);
}

// ---------------------------------------------------------------------------
// Storage types: what a key or value reads back as once stored (TRACE.md,
// "Values"). Written from the definitions, not from kernels/: rounding to
// a grid by nearbyint (ties to even) in double, and ggml's reference
// quantizers, whose arithmetic is fp32 by definition.

// x rounded to nearest even with `bits` significant bits, exponent at least
// `min_exp` (below it the grid is that of min_exp: subnormals).
double RoundToGrid(double x, int bits, int min_exp) {
  if (x == 0.0) return x;
  int e = 0;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  const double ulp = std::ldexp(1.0, std::max(e - 1, min_exp) - (bits - 1));
  return std::nearbyint(x / ulp) * ulp;
}
float ToF16(float x) { return static_cast<float>(RoundToGrid(x, 11, -14)); }

// One row of D values (fp32-exact) rounded through `type`, in place.
void RoundThroughStorage(KvType type, double* row, int D) {
  if (type == KvType::kF32) return;
  if (type == KvType::kBf16) {
    for (int e = 0; e < D; ++e) row[e] = RoundToGrid(row[e], 8, -126);
    return;
  }
  for (int b = 0; b < D; b += 32) {  // D is a multiple of 32 (the parser checks)
    float x[32];
    for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(row[b + j]);
    if (type == KvType::kQ8_0) {
      float amax = 0.0f;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      const double stored_d = ToF16(d);
      for (int j = 0; j < 32; ++j) row[b + j] = std::round(x[j] * id) * stored_d;
    } else {  // q4_0: the signed value of largest magnitude (the first) maps to -8
      float amax = 0.0f, max = 0.0f;
      for (float v : x) {
        if (amax < std::fabs(v)) {
          amax = std::fabs(v);
          max = v;
        }
      }
      const float d = max / -8.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      const double stored_d = ToF16(d);
      for (int j = 0; j < 32; ++j) {
        const float shifted = x[j] * id + 8.5f;
        const int nibble = std::min(15, static_cast<int>(shifted));
        row[b + j] = (nibble - 8) * stored_d;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Layers and the two kinds of computation.

double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }
double Silu(double z) { return z / (1.0 + std::exp(-z)); }

// Attention output of `query` (a real token) that sees the real tokens
// `visible` (ascending positions).
std::vector<double> AttentionOutput(const LayerConfig& layer, int l, const trace::SeenItem& query,
                                    const std::vector<trace::SeenItem>& visible) {
  const int H = layer.heads, Hq = layer.QueryHeads(), D = layer.dim;
  // Contents of the query and of every visible token: q[Hq*D], k[H*D], v[H*D].
  Draws query_draws(SeedOfToken(l, query.id, query.pos));
  const std::vector<double> q = query_draws.Take(static_cast<size_t>(Hq) * D);
  std::vector<std::vector<double>> keys, values;
  for (const trace::SeenItem& token : visible) {
    Draws d(SeedOfToken(l, token.id, token.pos));
    d.Take(static_cast<size_t>(Hq) * D);  // its q
    keys.push_back(d.Take(static_cast<size_t>(H) * D));
    values.push_back(d.Take(static_cast<size_t>(H) * D));
    for (int h = 0; h < H; ++h) {  // stored per token and head
      RoundThroughStorage(layer.kv, &keys.back()[static_cast<size_t>(h) * D], D);
      RoundThroughStorage(layer.kv, &values.back()[static_cast<size_t>(h) * D], D);
    }
  }
  // Query head hq reads KV head hq / (Hq / H): contiguous groups.
  std::vector<double> o(static_cast<size_t>(Hq) * D, 0.0);
  for (int hq = 0; hq < Hq; ++hq) {
    const int h = hq / (Hq / H);
    std::vector<double> s(visible.size());
    for (size_t j = 0; j < visible.size(); ++j) {
      double dot = 0.0;
      for (int e = 0; e < D; ++e) dot += q[hq * D + e] * keys[j][h * D + e];
      s[j] = dot / std::sqrt(static_cast<double>(D));
    }
    double largest = -INFINITY;
    for (double x : s) largest = std::max(largest, x);
    double total = 0.0;
    for (double& x : s) {
      x = std::exp(x - largest);
      total += x;
    }
    for (size_t j = 0; j < visible.size(); ++j) {
      for (int e = 0; e < D; ++e) o[hq * D + e] += s[j] / total * values[j][h * D + e];
    }
  }
  return o;
}

// y (all value heads, head-major) after each of a row's real tokens, for
// the whole list, from a zero conv state and a zero recurrent state.
std::vector<std::vector<double>> RecurrentOutputs(const LayerConfig& layer, int l,
                                                  const std::vector<trace::SeenItem>& tokens) {
  const int Hv = layer.heads, Hk = layer.KeyHeads(), dk = layer.dk, dv = layer.dv, K = layer.conv;
  const int C = 2 * Hk * dk + Hv * dv;
  const int q_at = 0, k_at = Hk * dk, v_at = 2 * Hk * dk;
  // w[c][j], channel-major draws, times 0.5; w[c][K-1] multiplies the
  // current token.
  Draws weight_draws(SeedOfWeights(l));
  std::vector<std::vector<double>> w(static_cast<size_t>(C), std::vector<double>(K));
  for (int c = 0; c < C; ++c) {
    for (int j = 0; j < K; ++j) w[c][j] = weight_draws.Next() * 0.5;
  }
  std::vector<std::vector<double>> x;  // pre-conv inputs of tokens so far
  // S[h][i][j]: dv x dk per value head.
  std::vector<std::vector<std::vector<double>>> S(
      static_cast<size_t>(Hv),
      std::vector<std::vector<double>>(static_cast<size_t>(dv), std::vector<double>(dk, 0.0)));
  std::vector<std::vector<double>> ys;
  for (size_t t = 0; t < tokens.size(); ++t) {
    Draws d(SeedOfToken(l, tokens[t].id, tokens[t].pos));
    x.push_back(d.Take(static_cast<size_t>(C)));
    const std::vector<double> a = d.Take(static_cast<size_t>(Hv));
    const std::vector<double> b = d.Take(static_cast<size_t>(Hv));
    // Causal conv + silu.
    std::vector<double> u(static_cast<size_t>(C));
    for (int c = 0; c < C; ++c) {
      double sum = 0.0;
      for (int j = 0; j < K; ++j) {
        const long src = static_cast<long>(t) - K + 1 + j;
        const double xv = src < 0 ? 0.0 : x[static_cast<size_t>(src)][c];
        sum += w[c][j] * xv;
      }
      u[c] = Silu(sum);
    }
    // Per key head: q = l2(u_q) / sqrt(dk), k = l2(u_k).
    std::vector<std::vector<double>> qn(static_cast<size_t>(Hk)), kn(static_cast<size_t>(Hk));
    for (int kh = 0; kh < Hk; ++kh) {
      double qq = 0.0, kk = 0.0;
      for (int e = 0; e < dk; ++e) {
        qq += u[q_at + kh * dk + e] * u[q_at + kh * dk + e];
        kk += u[k_at + kh * dk + e] * u[k_at + kh * dk + e];
      }
      for (int e = 0; e < dk; ++e) {
        qn[kh].push_back(u[q_at + kh * dk + e] / std::sqrt(qq + 1e-6) /
                         std::sqrt(static_cast<double>(dk)));
        kn[kh].push_back(u[k_at + kh * dk + e] / std::sqrt(kk + 1e-6));
      }
    }
    std::vector<double> y;
    for (int h = 0; h < Hv; ++h) {
      const int kh = h / (Hv / Hk);
      const double g = Sigmoid(2.0 + a[h]);
      const double beta = Sigmoid(b[h]);
      std::vector<std::vector<double>>& Sh = S[h];
      for (int i = 0; i < dv; ++i) {
        for (int j = 0; j < dk; ++j) Sh[i][j] *= g;
      }
      for (int i = 0; i < dv; ++i) {
        double m = 0.0;
        for (int j = 0; j < dk; ++j) m += Sh[i][j] * kn[kh][j];
        const double delta = beta * (u[v_at + h * dv + i] - m);
        for (int j = 0; j < dk; ++j) Sh[i][j] += delta * kn[kh][j];
      }
      for (int i = 0; i < dv; ++i) {
        double yi = 0.0;
        for (int j = 0; j < dk; ++j) yi += Sh[i][j] * qn[kh][j];
        y.push_back(yi);
      }
    }
    ys.push_back(y);
  }
  return ys;
}

// ---------------------------------------------------------------------------
// The executor: the model says which tokens each query sees; the numbers
// are computed here.

const char* OpName(trace::Op op) {
  switch (op) {
    case trace::Op::kWindow: return "window";
    case trace::Op::kDecode: return "decode";
    case trace::Op::kTrim: return "trim";
    case trace::Op::kArm: return "arm";
    case trace::Op::kAccept: return "accept";
    case trace::Op::kFork: return "fork";
    case trace::Op::kUse: return "use";
    case trace::Op::kJoin: return "join";
    case trace::Op::kFilter: return "filter";
    case trace::Op::kExtract: return "extract";
    case trace::Op::kReload: return "reload";
    default: return "expect";
  }
}

bool ChangesPositions(trace::Op op) {
  return op == trace::Op::kWindow || op == trace::Op::kDecode || op == trace::Op::kTrim ||
         op == trace::Op::kAccept || op == trace::Op::kJoin || op == trace::Op::kFilter;
}

// Every real query of the forward the model has just run, in print order
// (layers in header order, rows ascending, positions ascending), with its
// values.
std::vector<Query> ForwardQueries(const testing::TraceModel& model) {
  std::vector<Query> queries;
  const std::vector<LayerConfig>& layers = model.layers();
  const std::vector<int32_t>& first = model.LastForwardFirst();
  const std::vector<int32_t>& real = model.LastForwardReal();
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerConfig& layer = layers[l];
    const bool attention = layer.kind != CacheKind::kSsm;
    for (int r = 0; r < model.rows(); ++r) {
      const std::vector<trace::SeenItem> tokens = model.Tokens(r);
      std::vector<std::vector<double>> ys;
      if (!attention && real[r] > 0) ys = RecurrentOutputs(layer, static_cast<int>(l), tokens);
      for (int32_t j = 0; j < real[r]; ++j) {
        Query query;
        query.layer = static_cast<int>(l);
        query.layer_name = layer.name;
        query.attention = attention;
        query.row = r;
        query.pos = first[r] + j;
        if (attention) {
          const std::vector<trace::SeenItem>* sees = model.Sees(query.layer, r, query.pos);
          for (const trace::SeenItem& item : *sees) query.sees.push_back({item.pos, item.id});
          query.values = AttentionOutput(layer, query.layer,
                                         tokens[static_cast<size_t>(query.pos)], *sees);
        } else {
          query.values = ys[static_cast<size_t>(query.pos)];
        }
        queries.push_back(std::move(query));
      }
    }
  }
  return queries;
}

}  // namespace

Result Evaluate(std::string_view text) {
  Result result;
  trace::Program program;
  trace::SyntaxError error;
  if (!trace::ParseTrace(text, "oracle.trace", &program, &error)) {
    result.error = std::to_string(error.line) + ": " + error.message;
    return result;
  }
  result.rows = program.rows;
  for (const LayerConfig& layer : program.layers) result.layer_names.push_back(layer.name);
  testing::TraceModel model(program, /*print=*/false);
  for (const trace::Statement& st : program.body) {
    if (st.op() >= trace::Op::kExpectSees) continue;  // the runner's business
    const testing::StepResult done = model.Apply(st);
    if (!done.done()) {
      result.error = std::to_string(st.line) + ": " + done.reason;
      return result;
    }
    Step step;
    step.line = st.line;
    step.op = OpName(st.op());
    step.forward = st.op() == trace::Op::kWindow || st.op() == trace::Op::kDecode;
    step.changes_positions = ChangesPositions(st.op());
    if (step.forward) step.queries = ForwardQueries(model);
    step.positions = model.Positions();
    result.steps.push_back(std::move(step));
  }
  result.ok = true;
  return result;
}

std::string FormatSees(const std::vector<std::pair<int32_t, int32_t>>& sees) {
  std::string s;
  for (const auto& [pos, id] : sees) {
    if (!s.empty()) s += ' ';
    s += std::to_string(pos);
    if (id != pos) s += ":" + std::to_string(id);
  }
  return s;
}

std::string FormatValue(double value) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.9g", value);
  return buf;
}

}  // namespace kvspec::oracle
