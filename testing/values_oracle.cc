// The double-precision oracle of values_oracle.h. Everything here follows
// TRACE.md's "Values" section line by line; nothing is shared with core/.
#include "testing/values_oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

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
// Layers and the two kinds of computation.

enum class Kind { kKv, kRotating, kSsm };

struct Layer {
  std::string name;
  Kind kind = Kind::kKv;
  int heads = 1;
  int dim = 4;
  int window = 0;  // 0: none
  int kheads = 0;  // 0: = heads
  int dk = 4;
  int dv = 4;
  int conv = 4;
};

double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }
double Silu(double z) { return z / (1.0 + std::exp(-z)); }

// Attention output of the query at position p of a row whose real tokens
// (ids, in position order) include p. Also fills the visible set.
std::vector<double> AttentionOutput(const Layer& layer, int l, const std::vector<int32_t>& ids,
                                    int32_t p, std::vector<std::pair<int32_t, int32_t>>* sees) {
  const int H = layer.heads, D = layer.dim;
  const int32_t first = layer.window > 0 ? std::max<int32_t>(0, p - layer.window + 1) : 0;
  std::vector<int32_t> visible;
  for (int32_t j = first; j <= p; ++j) {
    visible.push_back(j);
    sees->push_back({j, ids[static_cast<size_t>(j)]});
  }
  // Contents of the query and of every visible token: q[H*D], k[H*D], v[H*D].
  Draws query_draws(SeedOfToken(l, ids[static_cast<size_t>(p)], p));
  const std::vector<double> q = query_draws.Take(static_cast<size_t>(H) * D);
  std::vector<std::vector<double>> keys, values;
  for (int32_t j : visible) {
    Draws d(SeedOfToken(l, ids[static_cast<size_t>(j)], j));
    d.Take(static_cast<size_t>(H) * D);  // its q
    keys.push_back(d.Take(static_cast<size_t>(H) * D));
    values.push_back(d.Take(static_cast<size_t>(H) * D));
  }
  std::vector<double> o(static_cast<size_t>(H) * D, 0.0);
  for (int h = 0; h < H; ++h) {
    std::vector<double> s(visible.size());
    for (size_t j = 0; j < visible.size(); ++j) {
      double dot = 0.0;
      for (int e = 0; e < D; ++e) dot += q[h * D + e] * keys[j][h * D + e];
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
      for (int e = 0; e < D; ++e) o[h * D + e] += s[j] / total * values[j][h * D + e];
    }
  }
  return o;
}

// y (all value heads, head-major) after each of a row's real tokens, for
// the whole list, from a zero conv state and a zero recurrent state.
std::vector<std::vector<double>> RecurrentOutputs(const Layer& layer, int l,
                                                  const std::vector<int32_t>& ids) {
  const int Hv = layer.heads, Hk = layer.kheads, dk = layer.dk, dv = layer.dv, K = layer.conv;
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
  for (size_t t = 0; t < ids.size(); ++t) {
    Draws d(SeedOfToken(l, ids[t], static_cast<int32_t>(t)));
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
// Reading the text.

struct Problem {
  std::string message;
};

std::vector<std::string> Words(std::string line) {
  const size_t hash = line.find('#');
  if (hash != std::string::npos) line.resize(hash);
  std::vector<std::string> words;
  std::string word;
  for (char c : line) {
    if (c == ' ' || c == '\t' || c == '\r') {
      if (!word.empty()) words.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) words.push_back(word);
  return words;
}

int32_t Integer(const std::string& s) {
  if (s.empty() || s.size() > 10) throw Problem{"bad integer '" + s + "'"};
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') throw Problem{"bad integer '" + s + "'"};
    v = v * 10 + (c - '0');
  }
  if (v > 2147483647) throw Problem{"integer too large '" + s + "'"};
  return static_cast<int32_t>(v);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string part;
  for (char c : s) {
    if (c == sep) {
      parts.push_back(part);
      part.clear();
    } else {
      part += c;
    }
  }
  parts.push_back(part);
  return parts;
}

std::vector<int32_t> IntList(const std::string& s) {
  std::vector<int32_t> v;
  for (const std::string& part : Split(s, ',')) v.push_back(Integer(part));
  return v;
}

// "10,11/20,21" -> {{10,11},{20,21}}; a group may be empty.
std::vector<std::vector<int32_t>> IdGroups(const std::string& s) {
  std::vector<std::vector<int32_t>> groups;
  for (const std::string& group : Split(s, '/')) {
    groups.push_back(group.empty() ? std::vector<int32_t>() : IntList(group));
  }
  return groups;
}

// key=value words after the first `skip` words.
std::map<std::string, std::string> Options(const std::vector<std::string>& words, size_t skip) {
  std::map<std::string, std::string> options;
  for (size_t i = skip; i < words.size(); ++i) {
    const size_t eq = words[i].find('=');
    if (eq == std::string::npos) throw Problem{"unexpected word '" + words[i] + "'"};
    options[words[i].substr(0, eq)] = words[i].substr(eq + 1);
  }
  return options;
}

// ---------------------------------------------------------------------------
// The executor.

// What the numbers depend on: each row's real tokens' ids (position =
// index), and the round in progress.
struct State {
  std::vector<std::vector<int32_t>> ids;
  bool armed = false;
  bool verified = false;
  std::vector<size_t> round_start;  // per row, its token count before the verify forward
  std::vector<int32_t> round_real;  // per row, real tokens of the verify forward
};

class Executor {
 public:
  Result Run(std::string_view text) {
    std::vector<std::string> lines;
    {
      std::string all(text);
      std::istringstream in(all);
      std::string line;
      while (std::getline(in, line)) lines.push_back(line);
    }
    int header = 0;  // 0: expect `trace 1`, 1: `rows`, 2: layers and body
    for (size_t n = 0; n < lines.size(); ++n) {
      const int line_number = static_cast<int>(n) + 1;
      const std::vector<std::string> w = Words(lines[n]);
      if (w.empty()) continue;
      try {
        if (header == 0) {
          if (w.size() != 2 || w[0] != "trace" || w[1] != "1") throw Problem{"expected 'trace 1'"};
          header = 1;
        } else if (header == 1) {
          if (w.size() != 2 || w[0] != "rows") throw Problem{"expected 'rows B'"};
          rows_ = Integer(w[1]);
          if (rows_ < 1 || rows_ > 64) throw Problem{"rows out of range"};
          header = 2;
        } else if (w[0] == "layer") {
          if (!result_.steps.empty() || !layouts_.empty()) {
            throw Problem{"layer after the first operation"};
          }
          AddLayer(w);
        } else {
          if (layers_.empty()) throw Problem{"no layer"};
          if (layouts_.empty()) {
            State fresh;
            fresh.ids.assign(static_cast<size_t>(rows_), {});
            layouts_["main"] = fresh;
            current_ = "main";
          }
          Statement(w, line_number);
        }
      } catch (const Problem& p) {
        result_.error = std::to_string(line_number) + ": " + p.message;
        return result_;
      }
    }
    if (header < 2 || layers_.empty()) {
      result_.error = "incomplete header";
      return result_;
    }
    result_.ok = true;
    return result_;
  }

 private:
  void AddLayer(const std::vector<std::string>& w) {
    if (w.size() < 3) throw Problem{"layer NAME KIND"};
    Layer layer;
    layer.name = w[1];
    for (const Layer& other : layers_) {
      if (other.name == layer.name) throw Problem{"duplicate layer name"};
    }
    if (w[2] == "kv") {
      layer.kind = Kind::kKv;
    } else if (w[2] == "rotating") {
      layer.kind = Kind::kRotating;
    } else if (w[2] == "ssm") {
      layer.kind = Kind::kSsm;
    } else {
      throw Problem{"unknown layer kind '" + w[2] + "'"};
    }
    for (const auto& [key, value] : Options(w, 3)) {
      const int v = Integer(value);
      if (key == "heads") {
        layer.heads = v;
      } else if (key == "dim") {
        layer.dim = v;
      } else if (key == "window") {
        layer.window = v;
      } else if (key == "capacity") {
        // Placement only: the numbers do not depend on it.
      } else if (key == "kheads") {
        layer.kheads = v;
      } else if (key == "dk") {
        layer.dk = v;
      } else if (key == "dv") {
        layer.dv = v;
      } else if (key == "conv") {
        layer.conv = v;
      } else {
        throw Problem{"unknown key '" + key + "'"};
      }
    }
    if (layer.kheads == 0) layer.kheads = layer.heads;
    if (layer.kind == Kind::kRotating && layer.window < 1) throw Problem{"rotating needs a window"};
    if (layer.heads < 1 || layer.dim < 1 || layer.dk < 1 || layer.dv < 1 || layer.conv < 1 ||
        layer.kheads < 1 || layer.heads % layer.kheads != 0) {
      throw Problem{"bad layer shape"};
    }
    layers_.push_back(layer);
    result_.layer_names.push_back(layer.name);
    result_.rows = rows_;
  }

  State& Cur() { return layouts_.at(current_); }

  void Statement(const std::vector<std::string>& w, int line) {
    const std::string& op = w[0];
    if (op == "expect") return;  // expectations are the runner's business
    Step step;
    step.line = line;
    step.op = op;
    State& s = Cur();
    if (op == "window" || op == "decode") {
      Forward(w, &step);
    } else if (op == "trim") {
      if (w.size() < 2 || w.size() > 3 || (w.size() == 3 && w[2] != "bypass")) {
        throw Problem{"trim N [bypass]"};
      }
      const int32_t n = Integer(w[1]);
      if (s.armed) throw Problem{"trim while armed"};
      for (const Layer& layer : layers_) {
        if (layer.kind == Kind::kSsm) throw Problem{"trim with an ssm layer"};
      }
      for (const auto& row : s.ids) {
        if (row.size() < static_cast<size_t>(n)) throw Problem{"trim of more than a row holds"};
      }
      for (auto& row : s.ids) row.resize(row.size() - static_cast<size_t>(n));
      step.changes_positions = true;
    } else if (op == "arm") {
      if (w.size() != 1) throw Problem{"arm takes nothing"};
      if (s.armed) throw Problem{"already armed"};
      s.armed = true;
      s.verified = false;
    } else if (op == "accept") {
      if (w.size() != 2) throw Problem{"accept K"};
      if (!s.armed || !s.verified) throw Problem{"accept without a verified round"};
      std::vector<int32_t> keep = IntList(w[1]);
      if (keep.size() == 1) keep.assign(static_cast<size_t>(rows_), keep[0]);
      if (keep.size() != static_cast<size_t>(rows_)) throw Problem{"accept list length"};
      for (int r = 0; r < rows_; ++r) {
        if (keep[r] > s.round_real[r]) throw Problem{"accept more than the round wrote"};
        s.ids[r].resize(s.round_start[r] + static_cast<size_t>(keep[r]));
      }
      s.armed = false;
      s.verified = false;
      step.changes_positions = true;
    } else if (op == "fork") {
      if (w.size() != 2) throw Problem{"fork NAME"};
      if (layouts_.count(w[1])) throw Problem{"fork onto an existing name"};
      const State copy = s;
      layouts_[w[1]] = copy;
    } else if (op == "use") {
      if (w.size() != 2) throw Problem{"use NAME"};
      if (!layouts_.count(w[1])) throw Problem{"use of an unknown name"};
      current_ = w[1];
    } else if (op == "reload") {
      if (w.size() != 1) throw Problem{"reload takes nothing"};
      // The codec reads back exactly what was written: nothing changes.
    } else {
      throw Problem{"'" + op + "' is not supported by the oracle"};
    }
    for (const auto& row : Cur().ids) step.positions.push_back(static_cast<int32_t>(row.size()));
    result_.steps.push_back(step);
  }

  void Forward(const std::vector<std::string>& w, Step* step) {
    State& s = Cur();
    const bool decode = w[0] == "decode";
    int32_t columns = 1;
    size_t skip = 1;
    if (!decode) {
      if (w.size() < 2) throw Problem{"window L"};
      columns = Integer(w[1]);
      if (columns < 1) throw Problem{"L must be >= 1"};
      skip = 2;
    }
    const std::map<std::string, std::string> options = Options(w, skip);
    std::vector<int32_t> left(static_cast<size_t>(rows_), 0), right = left;
    std::vector<std::vector<int32_t>> ids;
    for (const auto& [key, value] : options) {
      if (key == "left" && !decode) {
        left = IntList(value);
      } else if (key == "right" && !decode) {
        right = IntList(value);
      } else if (key == "ids") {
        ids = IdGroups(value);
        if (ids.size() != static_cast<size_t>(rows_)) throw Problem{"ids: one group per row"};
      } else {
        throw Problem{"unknown option '" + key + "'"};
      }
    }
    if (left.size() != static_cast<size_t>(rows_) || right.size() != left.size()) {
      throw Problem{"left/right: one value per row"};
    }
    if (s.armed && s.verified) throw Problem{"a second forward in a round"};
    std::vector<size_t> start(static_cast<size_t>(rows_));
    std::vector<int32_t> real(static_cast<size_t>(rows_));
    for (int r = 0; r < rows_; ++r) {
      start[r] = s.ids[r].size();
      if (left[r] > 0 && start[r] > 0) throw Problem{"left padding of a row holding tokens"};
      if (static_cast<int64_t>(left[r]) + right[r] > columns) throw Problem{"left + right > L"};
      real[r] = columns - left[r] - right[r];
      if (ids.empty()) {
        for (int32_t j = 0; j < real[r]; ++j)
          s.ids[r].push_back(static_cast<int32_t>(start[r]) + j);
      } else {
        if (ids[r].size() != static_cast<size_t>(real[r])) throw Problem{"ids: count per row"};
        for (int32_t id : ids[r]) s.ids[r].push_back(id);
      }
    }
    if (s.armed) {
      s.verified = true;
      s.round_start = start;
      s.round_real = real;
    }
    // Outputs, in print order: layer, row, position.
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& layer = layers_[l];
      const bool attention = layer.kind != Kind::kSsm;
      for (int r = 0; r < rows_; ++r) {
        std::vector<std::vector<double>> ys;
        if (!attention && real[r] > 0) ys = RecurrentOutputs(layer, static_cast<int>(l), s.ids[r]);
        for (int32_t j = 0; j < real[r]; ++j) {
          Query query;
          query.layer = static_cast<int>(l);
          query.layer_name = layer.name;
          query.attention = attention;
          query.row = r;
          query.pos = static_cast<int32_t>(start[r]) + j;
          if (attention) {
            query.values =
                AttentionOutput(layer, static_cast<int>(l), s.ids[r], query.pos, &query.sees);
          } else {
            query.values = ys[static_cast<size_t>(query.pos)];
          }
          step->queries.push_back(query);
        }
      }
    }
    step->forward = true;
    step->changes_positions = true;
  }

  int rows_ = 0;
  std::vector<Layer> layers_;
  std::map<std::string, State> layouts_;
  std::string current_;
  Result result_;
};

}  // namespace

Result Evaluate(std::string_view text) { return Executor().Run(text); }

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
