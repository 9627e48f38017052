#include "trace/runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <tuple>

#include "core/codec/codec.h"
#include "trace/values.h"

namespace kvspec::trace {

// ---------------------------------------------------------------------------
// Tags and contents

bool Tag::operator<(const Tag& o) const {
  if (kind != o.kind) return kind < o.kind;  // tokens first, then pad, zero, junk
  return pos != o.pos ? pos < o.pos : id < o.id;
}

std::string Tag::ToString() const {
  switch (kind) {
    case kPad: return "pad";
    case kZero: return "zero";
    case kJunk: return "junk";
    case kToken: break;
  }
  return pos == id ? std::to_string(pos) : std::to_string(pos) + ":" + std::to_string(id);
}

void ContentIndex::AttentionToken(int layer, int32_t id, int32_t pos, int heads,
                                  int dim, float* q, float* k, float* v) {
  ValueStream stream(TokenSeed(static_cast<uint64_t>(layer), static_cast<uint64_t>(id),
                               static_cast<uint64_t>(pos)));
  const size_t n = static_cast<size_t>(heads) * dim;
  stream.Fill(q, n);
  stream.Fill(k, n);
  stream.Fill(v, n);
}

void ContentIndex::RecurrentToken(int layer, int32_t id, int32_t pos, size_t channels,
                                  size_t value_heads, float* x, float* gate, float* beta) {
  ValueStream stream(TokenSeed(static_cast<uint64_t>(layer), static_cast<uint64_t>(id),
                               static_cast<uint64_t>(pos)));
  stream.Fill(x, channels);
  for (size_t h = 0; h < value_heads; ++h) {
    const float a = stream.Next();
    gate[h] = 1.0f / (1.0f + std::exp(-(2.0f + a)));
  }
  for (size_t h = 0; h < value_heads; ++h) {
    const float b = stream.Next();
    beta[h] = 1.0f / (1.0f + std::exp(-b));
  }
}

std::vector<float> ContentIndex::ConvWeights(int layer, size_t channels, size_t kernel) {
  // Drawn channel-major (w[c][j] is draw c*K + j + 1), times 0.5; returned
  // time-major [K][C] as the kernel takes it.
  ValueStream stream(WeightSeed(static_cast<uint64_t>(layer)));
  std::vector<float> w(channels * kernel);
  for (size_t c = 0; c < channels; ++c) {
    for (size_t j = 0; j < kernel; ++j) w[j * channels + c] = stream.Next() * 0.5f;
  }
  return w;
}

float ContentIndex::PadValue() {
  const uint32_t bits = 0x7FC0DEADu;  // a quiet NaN with a recognisable payload
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint64_t ContentIndex::HashKv(int layer, const float* k, const float* v, size_t count) {
  Hasher h;
  h.Value(layer);
  h.Bytes(k, count * sizeof(float));
  h.Bytes(v, count * sizeof(float));
  return h.value();
}

void ContentIndex::Remember(int layer, int32_t id, int32_t pos, const float* k,
                            const float* v, size_t count) {
  Tag t;
  t.kind = Tag::kToken;
  t.pos = pos;
  t.id = id;
  tags_.emplace(HashKv(layer, k, v, count), t);
}

Tag ContentIndex::Recover(int layer, const KvView& view, int row, int32_t slot) const {
  const size_t dim = static_cast<size_t>(view.dim);
  const size_t count = dim * view.kv_heads;
  std::vector<float> k(count), v(count);
  for (int h = 0; h < view.kv_heads; ++h) {
    std::memcpy(&k[h * dim], view.Key(row, h, slot), dim * sizeof(float));
    std::memcpy(&v[h * dim], view.Value(row, h, slot), dim * sizeof(float));
  }
  Tag t;
  auto all_bits = [&](uint32_t bits) {
    for (size_t i = 0; i < count; ++i) {
      uint32_t a, b;
      std::memcpy(&a, &k[i], 4);
      std::memcpy(&b, &v[i], 4);
      if (a != bits || b != bits) return false;
    }
    return true;
  };
  uint32_t pad_bits;
  const float pad = PadValue();
  std::memcpy(&pad_bits, &pad, 4);
  if (all_bits(0)) {
    t.kind = Tag::kZero;
  } else if (all_bits(pad_bits)) {
    t.kind = Tag::kPad;
  } else {
    auto it = tags_.find(HashKv(layer, k.data(), v.data(), count));
    if (it != tags_.end()) {
      t = it->second;
    } else {
      t.kind = Tag::kJunk;
    }
  }
  return t;
}

// ---------------------------------------------------------------------------
namespace {

using QueryKey = std::tuple<int, int, int32_t>;  // layer, row, pos

struct LastForward {
  bool valid = false;
  std::map<QueryKey, std::vector<Tag>> sees;
  std::map<QueryKey, std::vector<float>> outs;
};

struct NamedLayout {
  std::unique_ptr<Layout> layout;
  LastForward last;
};

// The outcome of one statement.
struct Outcome {
  int code = 0;  // 0 done, 1 refused, 2 limit exceeded
  std::string message;
  static Outcome Refused(std::string m) { return {1, std::move(m)}; }
  static Outcome Limit(std::string m) { return {2, std::move(m)}; }
};

std::string FormatValue(float v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(v));
  return buf;
}

std::string JoinTags(const std::vector<Tag>& tags) {
  std::string s;
  for (const Tag& t : tags) {
    s += ' ';
    s += t.ToString();
  }
  return s;
}

std::string JoinInts(const std::vector<int32_t>& v, char sep = ',') {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += sep;
    s += std::to_string(v[i]);
  }
  return s;
}

class Runner {
 public:
  Runner(const Program& program, const RunOptions& options, std::ostream& out,
         std::ostream& err)
      : p_(program), opt_(options), out_(out), err_(err) {
    if (opt_.emit) {
      // Expectations the run regenerates are dropped from the echo.
      for (const Statement& st : p_.body) {
        if (st.op() == Op::kExpectSees || st.op() == Op::kExpectPositions ||
            (opt_.values && st.op() == Op::kExpectOut)) {
          drop_lines_.insert(st.line);
        }
      }
    }
  }

  int Run() {
    std::unique_ptr<Layout> layout;
    Status s = Layout::Create(p_.rows, p_.layers, &layout);
    if (!s.ok()) {
      int line = p_.header_end_line;
      for (size_t l = 0; l < p_.layers.size(); ++l) {
        if (s.message().find("'" + p_.layers[l].name + "'") != std::string::npos) {
          line = p_.layer_lines[l];
        }
      }
      Refusal(line, s.message());
      return Finish(line);
    }
    layout->set_reference_kernels(opt_.reference_kernels);
    layouts_["main"].layout = std::move(layout);
    current_ = "main";
    conv_weights_.resize(p_.layers.size());
    for (size_t l = 0; l < p_.layers.size(); ++l) {
      const LayerConfig& d = p_.layers[l];
      if (d.kind == CacheKind::kSsm) {
        conv_weights_[l] = ContentIndex::ConvWeights(static_cast<int>(l), d.SsmChannels(),
                                                     static_cast<size_t>(d.conv));
      }
    }
    for (const Statement& st : p_.body) {
      Outcome o = Execute(st);
      if (o.code == 2) {
        err_ << p_.file << ":" << st.line << ":1: " << o.message << "\n";
        status_ = 2;
        return Finish(st.line);
      }
      if (o.code == 1) {
        Refusal(st.line, o.message);
        return Finish(st.line);
      }
    }
    return Finish(static_cast<int>(p_.lines.size()));
  }

 private:
  Layout& Cur() { return *layouts_[current_].layout; }
  LastForward& Last() { return layouts_[current_].last; }

  void Refusal(int line, const std::string& message) {
    err_ << p_.file << ":" << line << ": error: " << message << "\n";
    status_ = std::max(status_, 1);
  }
  void Failed(const Statement& st, const std::string& expected, const std::string& got) {
    err_ << p_.file << ":" << st.line << ": expected " << expected << " got " << got << "\n";
    status_ = std::max(status_, 1);
  }

  // Writes the emitted trace (lines up to `last_line`) when emitting.
  int Finish(int last_line) {
    if (opt_.emit) {
      for (int line = 1; line <= last_line && line <= static_cast<int>(p_.lines.size()); ++line) {
        if (!drop_lines_.count(line)) out_ << p_.lines[line - 1] << "\n";
        auto it = emit_after_.find(line);
        if (it != emit_after_.end()) {
          for (const std::string& s : it->second) out_ << s << "\n";
        }
      }
    }
    return status_;
  }

  // Normal output, or nothing while emitting.
  void Print(const std::string& line) {
    if (!opt_.emit) out_ << line << "\n";
  }
  void EmitAfter(const Statement& st, std::string line) {
    if (opt_.emit && top_level_) emit_after_[st.line].push_back(std::move(line));
  }

  Outcome Execute(const Statement& st) {
    switch (st.op()) {
      case Op::kWindow:
        return Forward(st, st.Get<WindowOp>(), false);
      case Op::kDecode:
        return Forward(st, st.Get<DecodeOp>().AsWindow(), true);
      case Op::kTrim: {
        const TrimOp& trim = st.Get<TrimOp>();
        Status s = Cur().Trim(trim.count, trim.bypass);
        if (!s.ok()) return Outcome::Refused(s.message());
        EmitPositions(st);
        return {};
      }
      case Op::kArm: {
        Status s = Cur().Arm();
        if (!s.ok()) return Outcome::Refused(s.message());
        return {};
      }
      case Op::kAccept: {
        Status s = Cur().Accept(st.Get<AcceptOp>().keep);
        if (!s.ok()) return Outcome::Refused(s.message());
        PrintStates();
        EmitPositions(st);
        return {};
      }
      case Op::kFork: {
        const std::string& name = st.Get<ForkOp>().name;
        if (layouts_.count(name)) {
          return Outcome::Refused("fork: a layout named '" + name + "' exists");
        }
        if (Outcome o = Budget(Cur().allocatedBytes(), "fork"); o.code) return o;
        NamedLayout copy;
        copy.layout = Cur().Copy();
        copy.last = Last();
        layouts_[name] = std::move(copy);
        return {};
      }
      case Op::kUse: {
        const std::string& name = st.Get<UseOp>().name;
        if (!layouts_.count(name)) {
          return Outcome::Refused("use: no layout named '" + name + "'");
        }
        current_ = name;
        return {};
      }
      case Op::kJoin: {
        const std::string& name = st.Get<JoinOp>().name;
        auto it = layouts_.find(name);
        if (it == layouts_.end()) {
          return Outcome::Refused("join: no layout named '" + name + "'");
        }
        if (name == current_) return Outcome::Refused("join: a layout cannot join itself");
        const Layout& other = *it->second.layout;
        if (Outcome o = Budget(other.allocatedBytes() + Cur().allocatedBytes(), "join"); o.code) {
          return o;
        }
        if (Cur().rows() + other.rows() > kMaxRows) {
          return Outcome::Refused("join: " + std::to_string(Cur().rows() + other.rows()) +
                                  " rows exceed the limit of " + std::to_string(kMaxRows));
        }
        Status s = Cur().Join(other);
        if (!s.ok()) return Outcome::Refused(s.message());
        Last() = LastForward();
        return {};
      }
      case Op::kFilter: {
        Status s = Cur().Filter(st.Get<FilterOp>().rows);
        if (!s.ok()) return Outcome::Refused(s.message());
        Last() = LastForward();
        return {};
      }
      case Op::kExtract: {
        const ExtractOp& extract = st.Get<ExtractOp>();
        if (layouts_.count(extract.name)) {
          return Outcome::Refused("extract: a layout named '" + extract.name + "' exists");
        }
        if (Outcome o = Budget(Cur().allocatedBytes() / std::max(1, Cur().rows()), "extract");
            o.code) {
          return o;
        }
        std::unique_ptr<Layout> extracted;
        Status s = Cur().Extract(extract.row, &extracted);
        if (!s.ok()) return Outcome::Refused(s.message());
        layouts_[extract.name].layout = std::move(extracted);
        return {};
      }
      case Op::kReload: {
        // Through the persistence codec and back; the last forward stays.
        if (Outcome o = Budget(2 * Cur().allocatedBytes(), "reload"); o.code) return o;
        std::string bytes;
        Status s = EncodeLayout(Cur(), &bytes);
        std::unique_ptr<Layout> loaded;
        if (s.ok() && !opt_.save_reloads_dir.empty()) {
          const std::string base = p_.file.substr(p_.file.find_last_of('/') + 1);
          const std::string path =
              opt_.save_reloads_dir + "/" + base + "." + std::to_string(st.line) + ".kvsl";
          std::ofstream file(path, std::ios::binary);
          file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
          if (!file) return Outcome::Refused("reload: cannot write " + path);
        }
        if (s.ok()) s = DecodeLayout(bytes, &loaded);
        if (!s.ok()) return Outcome::Refused("reload: " + s.message());
        loaded->set_reference_kernels(opt_.reference_kernels);
        // A reload changes the layout (TRACE.md rule 3): no bypass trim after it.
        loaded->ForgetBypassBound();
        layouts_[current_].layout = std::move(loaded);
        return {};
      }
      case Op::kExpectSees:
        return CheckSees(st, st.Get<ExpectSees>());
      case Op::kExpectOut:
        return CheckOut(st, st.Get<ExpectOut>());
      case Op::kExpectPositions:
        return CheckPositions(st, st.Get<ExpectPositions>());
      case Op::kExpectError:
        return CheckError(st, st.Get<ExpectError>());
      case Op::kExpectEqual:
        return CheckEqual(st, st.Get<ExpectEqual>());
      case Op::kExpectTrimmable: {
        const ExpectTrimmable& e = st.Get<ExpectTrimmable>();
        const bool got = Cur().cache(e.layer).isTrimmable();
        if (got != e.yes) {
          Failed(st, "trimmable " + p_.layers[e.layer].name + " " + (e.yes ? "yes" : "no"),
                 got ? "yes" : "no");
        }
        return {};
      }
      case Op::kExpectKind: {
        const ExpectKind& e = st.Get<ExpectKind>();
        const std::string got = Cur().cache(e.layer).kind();
        if (got != e.kind_string) {
          Failed(st, "kind " + p_.layers[e.layer].name + " " + e.kind_string, got);
        }
        return {};
      }
      case Op::kExpectBytesPerToken: {
        const ExpectBytesPerToken& e = st.Get<ExpectBytesPerToken>();
        const int64_t got = static_cast<int64_t>(Cur().cache(e.layer).bytesPerToken());
        if (got != e.bytes) {
          Failed(st, "bytes_per_token " + p_.layers[e.layer].name + " " +
                         std::to_string(e.bytes),
                 std::to_string(got));
        }
        return {};
      }
    }
    return Outcome::Refused("unknown statement");
  }

  // Whether `more` bytes on top of every layout's storage fit the budget.
  Outcome Budget(size_t more, const char* what) const {
    size_t total = more;
    for (const auto& named : layouts_) total += named.second.layout->allocatedBytes();
    if (total > opt_.max_bytes) {
      return Outcome::Limit(std::string(what) + ": storage would exceed the limit of " +
                            std::to_string(opt_.max_bytes >> 20) + " MiB");
    }
    return {};
  }

  void EmitPositions(const Statement& st) {
    EmitAfter(st, "expect positions " + JoinInts(Cur().positions()));
  }

  Outcome Forward(const Statement& st, const WindowOp& w, bool decode) {
    Layout& layout = Cur();
    const int rows = layout.rows();
    ForwardColumns cols = ForwardColumns::Dense(rows, decode ? 1 : w.columns, decode);
    if (w.has_left) {
      if (w.left.size() != static_cast<size_t>(rows)) {
        return Outcome::Refused("left= has " + std::to_string(w.left.size()) +
                                " values for " + std::to_string(rows) + " rows");
      }
      cols.left = w.left;
    }
    if (w.has_right) {
      if (w.right.size() != static_cast<size_t>(rows)) {
        return Outcome::Refused("right= has " + std::to_string(w.right.size()) +
                                " values for " + std::to_string(rows) + " rows");
      }
      cols.right = w.right;
    }
    Status check = layout.CheckForward(cols);
    if (!check.ok()) return Outcome::Refused(check.message());
    const std::vector<int32_t> before = layout.positions();
    // Ids of each row's real tokens.
    std::vector<std::vector<int32_t>> ids(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      const int32_t real = cols.Real(r);
      if (w.has_ids) {
        if (w.ids.size() != static_cast<size_t>(rows)) {
          return Outcome::Refused("ids= has " + std::to_string(w.ids.size()) +
                                  " groups for " + std::to_string(rows) + " rows");
        }
        if (w.ids[r].size() != static_cast<size_t>(real)) {
          return Outcome::Refused("ids= gives row " + std::to_string(r) + " " +
                                  std::to_string(w.ids[r].size()) + " ids for " +
                                  std::to_string(real) + " real tokens");
        }
        ids[r] = w.ids[r];
      } else {
        for (int32_t j = 0; j < real; ++j) ids[r].push_back(before[r] + j);
      }
      if (static_cast<int64_t>(before[r]) + real > kMaxTokensPerRow) {
        return Outcome::Limit("row " + std::to_string(r) + " would exceed " +
                              std::to_string(kMaxTokensPerRow) + " tokens");
      }
    }
    size_t others = 0;
    for (const auto& [name, named] : layouts_) {
      if (name != current_) others += named.layout->allocatedBytes();
    }
    if (others + layout.BytesAfterForward(cols.columns) > opt_.max_bytes) {
      return Outcome::Limit("storage would exceed the limit of " +
                            std::to_string(opt_.max_bytes >> 20) + " MiB");
    }

    // Contents: q, k, v per attention layer, [rows][L][heads][dim].
    const size_t L = static_cast<size_t>(cols.columns);
    const size_t nl = layout.size();
    std::vector<std::vector<float>> q(nl), k(nl), v(nl), o(nl);
    std::vector<AttentionIO> io(nl);
    std::vector<std::vector<float>> x(nl), gate(nl), beta(nl);
    for (size_t l = 0; l < nl; ++l) {
      const LayerConfig& d = p_.layers[l];
      if (d.kind == CacheKind::kSsm) {
        // Per token: x[C], then a[Hv] and b[Hv] turned into gate and beta.
        const size_t C = d.SsmChannels();
        const size_t hv = static_cast<size_t>(d.heads);
        x[l].assign(static_cast<size_t>(rows) * L * C, ContentIndex::PadValue());
        gate[l].assign(static_cast<size_t>(rows) * L * hv, ContentIndex::PadValue());
        beta[l].assign(gate[l].size(), ContentIndex::PadValue());
        o[l].assign(static_cast<size_t>(rows) * L * hv * d.dv, 0.0f);
        for (int r = 0; r < rows; ++r) {
          for (int32_t j = 0; j < cols.Real(r); ++j) {
            const size_t c = r * L + static_cast<size_t>(cols.left[r] + j);
            ContentIndex::RecurrentToken(static_cast<int>(l), ids[r][j], before[r] + j, C, hv,
                                         &x[l][c * C], &gate[l][c * hv], &beta[l][c * hv]);
          }
        }
        SsmIO ssm;
        ssm.conv_weights = conv_weights_[l].data();
        ssm.x = x[l].data();
        ssm.gate = gate[l].data();
        ssm.beta = beta[l].data();
        ssm.y = o[l].data();
        io[l] = AttentionIO(ssm);
        continue;
      }
      const size_t hd = static_cast<size_t>(d.heads) * d.dim;
      const size_t n = static_cast<size_t>(rows) * L * hd;
      q[l].assign(n, ContentIndex::PadValue());
      k[l].assign(n, ContentIndex::PadValue());
      v[l].assign(n, ContentIndex::PadValue());
      o[l].assign(n, 0.0f);
      for (int r = 0; r < rows; ++r) {
        for (int32_t j = 0; j < cols.Real(r); ++j) {
          const size_t at = (r * L + static_cast<size_t>(cols.left[r] + j)) * hd;
          ContentIndex::AttentionToken(static_cast<int>(l), ids[r][j], before[r] + j,
                                       d.heads, d.dim, &q[l][at], &k[l][at], &v[l][at]);
        }
      }
      io[l] = AttentionIO{q[l].data(), k[l].data(), v[l].data(), o[l].data()};
    }
    Status s = layout.Forward(cols, io);
    if (!s.ok()) return Outcome::Refused(s.message());

    // Remember what was written, then read back what every query saw.
    for (size_t l = 0; l < nl; ++l) {
      const LayerConfig& d = p_.layers[l];
      if (d.kind == CacheKind::kSsm) continue;
      const size_t hd = static_cast<size_t>(d.heads) * d.dim;
      for (int r = 0; r < rows; ++r) {
        for (int32_t j = 0; j < cols.Real(r); ++j) {
          const size_t at = (r * L + static_cast<size_t>(cols.left[r] + j)) * hd;
          index_.Remember(static_cast<int>(l), ids[r][j], before[r] + j, &k[l][at],
                          &v[l][at], hd);
        }
      }
    }
    LastForward last;
    last.valid = true;
    std::vector<std::string> sees_lines, out_lines;
    for (size_t l = 0; l < nl; ++l) {
      const LayerConfig& d = p_.layers[l];
      const AttentionCache* cache = layout.attention(l);
      const Mask* mask = cache ? layout.LastMask(l) : nullptr;
      const KvView view = cache ? cache->View() : KvView();
      // Values per query (attention: all heads' o) or token (recurrent: y).
      const size_t per = cache ? static_cast<size_t>(d.heads) * d.dim
                               : static_cast<size_t>(d.heads) * d.dv;
      for (int r = 0; r < rows; ++r) {
        for (int32_t j = 0; j < cols.Real(r); ++j) {
          const int32_t col = cols.left[r] + j;
          const int32_t pos = before[r] + j;
          const std::string head = d.name + " r" + std::to_string(r) + " p" +
                                   std::to_string(pos) + ":";
          const QueryKey key{static_cast<int>(l), r, pos};
          if (cache) {
            std::vector<Tag> seen;
            for (int32_t slot = 0; slot < mask->slots; ++slot) {
              if (mask->Admits(r, col, slot)) {
                seen.push_back(index_.Recover(static_cast<int>(l), view, r, slot));
              }
            }
            std::sort(seen.begin(), seen.end());
            sees_lines.push_back("sees " + head + JoinTags(seen));
            last.sees[key] = std::move(seen);
          }
          const float* ov = &o[l][(r * L + static_cast<size_t>(col)) * per];
          std::vector<float> values(ov, ov + per);
          std::string line = "out " + head;
          for (float value : values) line += " " + FormatValue(value);
          out_lines.push_back(line);
          last.outs[key] = std::move(values);
        }
      }
    }
    Last() = std::move(last);
    for (const std::string& line : sees_lines) {
      Print(line);
      EmitAfter(st, "expect " + line);
    }
    if (opt_.values) {
      for (const std::string& line : out_lines) {
        Print(line);
        EmitAfter(st, "expect " + line);
      }
    }
    PrintStates();
    EmitPositions(st);
    return {};
  }

  // `state LAYER rR HASH` per recurrent layer and row.
  void PrintStates() {
    Layout& layout = Cur();
    for (size_t l = 0; l < layout.size(); ++l) {
      const SsmCacheBase* ssm = layout.recurrent(l);
      if (!ssm) continue;
      for (int r = 0; r < layout.rows(); ++r) {
        char hash[17];
        std::snprintf(hash, sizeof(hash), "%016llx",
                      static_cast<unsigned long long>(ssm->RowStateHash(r)));
        Print("state " + p_.layers[l].name + " r" + std::to_string(r) + " " + hash);
      }
    }
  }

  Outcome CheckSees(const Statement& st, const ExpectSees& e) {
    const std::string what = "sees " + p_.layers[e.layer].name + " r" +
                             std::to_string(e.row) + " p" + std::to_string(e.pos) + ":";
    std::vector<Tag> want;
    for (const SeenItem& item : e.items) {
      Tag t;
      t.pos = item.pos;
      t.id = item.id;
      want.push_back(t);
    }
    std::sort(want.begin(), want.end());
    const LastForward& last = Last();
    auto it = last.sees.find(QueryKey{e.layer, e.row, e.pos});
    if (!last.valid || it == last.sees.end()) {
      Failed(st, what + JoinTags(want), "no such query in the last forward");
    } else if (it->second != want) {
      Failed(st, what + JoinTags(want), JoinTags(it->second).substr(it->second.empty() ? 0 : 1));
    }
    return {};
  }

  Outcome CheckOut(const Statement& st, const ExpectOut& e) {
    const std::string what = "out " + p_.layers[e.layer].name + " r" +
                             std::to_string(e.row) + " p" + std::to_string(e.pos) + ":";
    std::string want_text;
    for (double x : e.values) want_text += " " + FormatValue(static_cast<float>(x));
    const LastForward& last = Last();
    auto it = last.outs.find(QueryKey{e.layer, e.row, e.pos});
    if (!last.valid || it == last.outs.end()) {
      Failed(st, what + want_text, "no such query in the last forward");
      return {};
    }
    const std::vector<float>& got = it->second;
    bool ok = got.size() == e.values.size();
    for (size_t i = 0; ok && i < got.size(); ++i) {
      const double ref = e.values[i];
      ok = std::fabs(static_cast<double>(got[i]) - ref) <= 1e-4 * (1.0 + std::fabs(ref));
    }
    if (!ok) {
      std::string got_text;
      for (float x : got) got_text += " " + FormatValue(x);
      Failed(st, what + want_text, got_text.substr(1));
    }
    return {};
  }

  Outcome CheckPositions(const Statement& st, const ExpectPositions& e) {
    const std::vector<int32_t> got = Cur().positions();
    if (e.positions.size() != got.size()) {
      return Outcome::Refused("expect positions lists " + std::to_string(e.positions.size()) +
                              " values for " + std::to_string(got.size()) + " rows");
    }
    if (got != e.positions) {
      Failed(st, "positions " + JoinInts(e.positions), JoinInts(got));
    }
    return {};
  }

  Outcome CheckError(const Statement& st, const ExpectError& e) {
    const uint64_t before = Cur().StateHash();
    const std::string before_name = current_;
    const size_t before_count = layouts_.size();
    const bool was_top = top_level_;
    top_level_ = false;
    Outcome o = Execute(*e.inner);
    top_level_ = was_top;
    if (o.code == 2) return o;
    if (o.code == 0) {
      Failed(st, "an error", "none");
      return {};
    }
    if (current_ != before_name || layouts_.size() != before_count ||
        Cur().StateHash() != before) {
      Failed(st, "the layout unchanged after the refusal (" + o.message + ")", "a change");
    }
    return {};
  }

  Outcome CheckEqual(const Statement& st, const ExpectEqual& e) {
    auto it = layouts_.find(e.name);
    if (it == layouts_.end()) {
      return Outcome::Refused("expect equal: no layout named '" + e.name + "'");
    }
    std::string diff = Difference(Cur(), *it->second.layout);
    if (!diff.empty()) Failed(st, "equal " + e.name, diff);
    return {};
  }

  // The first observable difference between two layouts, or "".
  static std::string Difference(const Layout& a, const Layout& b) {
    if (a.rows() != b.rows()) {
      return "rows " + std::to_string(a.rows()) + " vs " + std::to_string(b.rows());
    }
    if (a.positions() != b.positions()) {
      return "positions " + JoinInts(a.positions()) + " vs " + JoinInts(b.positions());
    }
    for (size_t l = 0; l < a.size(); ++l) {
      const SsmCacheBase* ra = a.recurrent(l);
      const SsmCacheBase* rb = b.recurrent(l);
      if (ra && rb) {
        const SsmShape& shape = ra->shape();
        for (int r = 0; r < a.rows(); ++r) {
          if (std::memcmp(ra->ConvState(r), rb->ConvState(r),
                          shape.ConvFloats() * sizeof(float)) != 0) {
            return "layer " + a.config(l).name + " row " + std::to_string(r) +
                   ": conv state differs";
          }
          if (std::memcmp(ra->RecurrentState(r), rb->RecurrentState(r),
                          shape.RecurrentFloats() * sizeof(float)) != 0) {
            return "layer " + a.config(l).name + " row " + std::to_string(r) +
                   ": recurrent state differs";
          }
        }
        continue;
      }
      const AttentionCache* ca = a.attention(l);
      const AttentionCache* cb = b.attention(l);
      if (!ca || !cb) continue;
      const KvView va = ca->View(), vb = cb->View();
      const size_t dim = static_cast<size_t>(va.dim);
      const std::vector<int32_t> next = a.positions();
      for (int r = 0; r < a.rows(); ++r) {
        // Every committed token of a kv layer; the last min(count, W - 1)
        // of a ring (all a later query can still see). Aligned from the end:
        // two schedules may leave different older tokens physically held.
        const std::vector<int32_t> sa = ca->LogicalSlots(r), sb = cb->LogicalSlots(r);
        size_t keep = static_cast<size_t>(next[r]);
        if (IsRotatingCache(ca->kind())) {
          keep = std::min(keep, static_cast<size_t>(ca->window() - 1));
        }
        const std::string where = "layer " + a.config(l).name + " row " + std::to_string(r);
        if (sa.size() < keep || sb.size() < keep) {
          return where + " holds " + std::to_string(sa.size()) + " vs " +
                 std::to_string(sb.size()) + " tokens, " + std::to_string(keep) + " compared";
        }
        for (size_t i = 0; i < keep; ++i) {
          const int32_t xa = sa[sa.size() - keep + i], xb = sb[sb.size() - keep + i];
          bool same = va.slot_pos[r * va.slot_stride + xa] == vb.slot_pos[r * vb.slot_stride + xb];
          for (int h = 0; same && h < va.kv_heads; ++h) {
            same = std::memcmp(va.Key(r, h, xa), vb.Key(r, h, xb), dim * 4) == 0 &&
                   std::memcmp(va.Value(r, h, xa), vb.Value(r, h, xb), dim * 4) == 0;
          }
          if (!same) {
            return where + " position " +
                   std::to_string(va.slot_pos[r * va.slot_stride + xa]) + " differs";
          }
        }
      }
    }
    return "";
  }

  const Program& p_;
  RunOptions opt_;
  std::ostream& out_;
  std::ostream& err_;
  std::map<std::string, NamedLayout> layouts_;
  std::string current_;
  ContentIndex index_;
  std::vector<std::vector<float>> conv_weights_;  // per ssm layer, [K][C]
  int status_ = 0;
  bool top_level_ = true;
  std::set<int> drop_lines_;
  std::map<int, std::vector<std::string>> emit_after_;
};

}  // namespace

int RunProgram(const Program& program, const RunOptions& options, std::ostream& out,
               std::ostream& err) {
  Runner runner(program, options, out, err);
  return runner.Run();
}

int RunTraceText(std::string_view text, std::string_view name, const RunOptions& options,
                 std::ostream& out, std::ostream& err) {
  Program program;
  SyntaxError error;
  if (!ParseTrace(text, name, &program, &error)) {
    err << error.ToString() << "\n";
    return 2;
  }
  RunOptions effective = options;
  for (const Statement& st : program.body) {
    if (st.op() == Op::kExpectOut) effective.values = true;
  }
  return RunProgram(program, effective, out, err);
}

int RunTraceFile(const std::string& path, const RunOptions& options, std::ostream& out,
                 std::ostream& err) {
  constexpr size_t kMaxFileBytes = size_t{4} << 20;
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      err << path << ":1:1: cannot open file\n";
      return 2;
    }
    char buf[1 << 16];
    while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
      text.append(buf, static_cast<size_t>(in.gcount()));
      if (text.size() > kMaxFileBytes) break;
    }
  }
  if (text.size() > kMaxFileBytes) {
    err << path << ":1:1: file larger than " << (kMaxFileBytes >> 20) << " MiB\n";
    return 2;
  }
  return RunTraceText(text, path == "-" ? std::string_view("<stdin>") : path, options, out, err);
}

}  // namespace kvspec::trace
