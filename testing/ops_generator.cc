// OpsGenerator: the header, the statement dispatch and the valid
// operations (ops_generator.h); the expectations and refused operations
// are in ops_expectations.cc.
#include "kvspec/testing/ops_generator.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kvspec/testing/generators.h"
#include "kvspec/testing/shape_generators.h"

namespace kvspec::testing {

std::string OpsGenerator::Generate() {
  Header();
  for (int i = 0; i < kMaxStatements && !c_.Exhausted() && !stopped_; ++i) OneStatement();
  return text_;
}

void OpsGenerator::Header() {
  rows_ = Range(1, 4);
  Line("trace 1");
  Line("rows " + std::to_string(rows_));
  const int layers = Range(1, 3);
  // About a third of the layouts hold a recurrent layer, alone or among
  // attention layers (hybrid).
  const int ssm_at = Chance(35) ? Range(0, layers - 1) : -1;
  for (int l = 0; l < layers; ++l) {
    LayerShape shape;
    if (l == ssm_at || (ssm_at >= 0 && Chance(15))) {
      SsmLayer(l, &shape);
      continue;
    }
    shape.ring = Chance(40);
    shape.name = (shape.ring ? "s" : "k") + std::to_string(l);
    shape.heads = Range(1, 4);
    shape.dim = Range(1, 4);
    shape.window = shape.ring || Chance(50) ? Range(1, kMaxColumns) : 0;
    shape.kv = DrawKvType(c_, &shape.dim);
    std::string line = "layer " + shape.name + (shape.ring ? " rotating" : " kv") +
                       " heads=" + std::to_string(shape.heads) +
                       " dim=" + std::to_string(shape.dim);
    if (shape.kv != KvType::kF32) line += std::string(" kv=") + KvTypeName(shape.kv);
    if (shape.window) line += " window=" + std::to_string(shape.window);
    shape.capacity = shape.window;
    if (shape.ring && Chance(30)) {
      shape.capacity += Range(0, 4);
      line += " capacity=" + std::to_string(shape.capacity);
    }
    Line(line);
    layers_.push_back(shape);
  }
  for (size_t l = 0; l < layers_.size(); ++l) {
    has_ssm_ = has_ssm_ || layers_[l].ssm;
    if (!layers_[l].ssm) attention_.push_back(l);
  }
  Shadow main;
  main.ids.resize(static_cast<size_t>(rows_));
  main.batched = rows_ > 1;
  layouts_["main"] = main;
  current_ = "main";
}

// `layer rL ssm ...`: small shapes (the fuzzer's speed), value heads a
// multiple of the key heads, conv kernels from 1 (no conv state) to 4.
void OpsGenerator::SsmLayer(int l, LayerShape* shape) {
  shape->ssm = true;
  shape->name = "r" + std::to_string(l);
  shape->heads = Range(1, 2);
  const int kheads = Chance(50) ? 1 : shape->heads;
  const int dk = Range(1, 4), dv = Range(1, 4), conv = Range(1, 4);
  std::string line = "layer " + shape->name + " ssm heads=" + std::to_string(shape->heads);
  if (kheads != shape->heads || Chance(30)) line += " kheads=" + std::to_string(kheads);
  line += " dk=" + std::to_string(dk) + " dv=" + std::to_string(dv) +
          " conv=" + std::to_string(conv);
  Line(line);
  layers_.push_back(*shape);
}

void OpsGenerator::OneStatement() {
  Shadow& s = Cur();
  // Steer rounds to completion: an armed round wants its verify forward,
  // a verified one its accept.
  if (s.armed && !s.verified && Chance(70)) return Chance(75) ? Window() : Decode();
  if (s.armed && s.verified && Chance(60)) return Accept();
  if (Chance(has_ssm_ ? 12 : 4)) return Twins();
  switch (Range(0, 17)) {
    case 0:
    case 1:
    case 2:
      return Window();
    case 3:
      return Decode();
    case 4:
      return Trim();
    case 5:
    case 6:
      return Arm();
    case 7:
      return Accept();
    case 8:
      return Fork();
    case 9:
      return Use();
    case 10:
      return ExpectPositions();
    case 11:
      return ExpectSees();
    case 12:
      return ExpectOther();
    case 13:
    case 14:
      return ExpectError();
    case 15:
      return Reload();
    case 16:
      return Batch();
    default:
      return Refused();
  }
}

// ---- Valid operations (as far as the shadow knows).

// Whether a ring of the current layout has wrapped.
bool OpsGenerator::Wrapped() {
  for (const LayerShape& layer : layers_) {
    if (layer.ring && Cur().peak > layer.capacity) return true;
  }
  return false;
}

// Per-row real counts and the option text of a window of L columns.
std::string OpsGenerator::WindowText(int32_t L, std::vector<int32_t>* real, bool* any_ids,
                                     std::vector<std::vector<int32_t>>* ids) {
  Shadow& s = Cur();
  std::vector<int32_t> left(static_cast<size_t>(Rows()), 0), right(left);
  bool any_left = false, any_right = false;
  for (size_t r = 0; r < left.size(); ++r) {
    if (s.Count(r) == 0 && Chance(40)) left[r] = Range(0, L);
    if (Chance(30)) right[r] = Range(0, L - left[r]);
    any_left |= left[r] > 0;
    any_right |= right[r] > 0;
    (*real)[r] = L - left[r] - right[r];
  }
  std::string text = "window " + std::to_string(L);
  if (any_left || Chance(5)) text += " left=" + JoinInts(left);
  if (any_right || Chance(5)) text += " right=" + JoinInts(right);
  *any_ids = Chance(50);
  ids->assign(left.size(), {});
  for (size_t r = 0; r < left.size(); ++r) {
    for (int32_t j = 0; j < (*real)[r]; ++j) {
      (*ids)[r].push_back(*any_ids ? Range(0, 40) : s.Count(r) + j);
    }
  }
  if (*any_ids) {
    std::string g;
    for (size_t r = 0; r < ids->size(); ++r) {
      if (r) g += "/";
      g += JoinInts((*ids)[r]);
    }
    text += " ids=" + g;
  }
  return text;
}

// Shadow update of a forward that was not refused.
void OpsGenerator::Forwarded(int32_t columns, const std::vector<int32_t>& real,
                             const std::vector<std::vector<int32_t>>& ids, bool decode) {
  Shadow& s = Cur();
  s.last_first = s.Positions();
  s.last_count = real;
  for (size_t r = 0; r < ids.size(); ++r) {
    s.ids[r].insert(s.ids[r].end(), ids[r].begin(), ids[r].end());
  }
  s.last_ids = s.ids;
  s.has_last = true;
  s.written = true;
  if (s.armed) {
    s.verified = true;
    s.verify_real = real;
  }
  s.after_window = !decode;
  s.window_real = real;
  s.peak_before = s.peak;
  s.columns += columns;
  s.peak = std::max(s.peak, s.columns);
}

void OpsGenerator::Window() {
  if (Cur().armed && Cur().verified) return Accept();
  if (budget_ < 1) return Cur().armed ? void() : Trim();
  const int32_t L = Range(1, std::min(kMaxColumns, budget_));
  budget_ -= L;
  std::vector<int32_t> real(static_cast<size_t>(Rows()));
  std::vector<std::vector<int32_t>> ids;
  bool any_ids = false;
  const std::string text = WindowText(L, &real, &any_ids, &ids);
  Line(text);
  Forwarded(L, real, ids, false);
}

void OpsGenerator::Decode() {
  if (Cur().armed && Cur().verified) return Accept();
  if (budget_ < 1) return Cur().armed ? void() : Trim();
  budget_ -= 1;
  std::vector<std::vector<int32_t>> ids(static_cast<size_t>(Rows()));
  std::string text = "decode";
  const bool any_ids = Chance(50);
  for (size_t r = 0; r < ids.size(); ++r) {
    ids[r].push_back(any_ids ? Range(0, 40) : Cur().Count(r));
  }
  if (any_ids) {
    std::string g;
    for (size_t r = 0; r < ids.size(); ++r) g += (r ? "/" : "") + std::to_string(ids[r][0]);
    text += " ids=" + g;
  }
  Line(text);
  Forwarded(1, std::vector<int32_t>(ids.size(), 1), ids, true);
}

void OpsGenerator::Trim() {
  Shadow& s = Cur();
  if (s.armed) return Accept();
  if (!s.written) return budget_ > 0 ? Window() : void();
  if (has_ssm_) {
    // Recurrent layers are never trimmed (TRACE.md precise rules 2, 3):
    // refused, with or without bypass, whatever the count.
    const std::string op = "trim " + std::to_string(Range(0, s.MinCount())) +
                           (s.after_window && Chance(50) ? " bypass" : "");
    return Line(wrap_next_ ? op : "expect error " + op);
  }
  int32_t bound = s.MinCount();
  const bool wrapped = Wrapped();
  const bool bypass = s.after_window && (wrapped || Chance(60));
  if (wrapped && !bypass) {  // not trimmable: say so, unless inside `expect error`
    return wrap_next_ ? void() : Line("expect error trim 0");
  }
  if (bypass) {
    for (int32_t real : s.window_real) bound = std::min(bound, real);
  }
  const int32_t n = Range(0, bound);
  Line("trim " + std::to_string(n) + (bypass ? " bypass" : ""));
  for (size_t r = 0; r < s.ids.size(); ++r) s.DropLast(r, n);
  s.columns -= n;
  if (bypass) PeakAsIfNotWritten(&s);
  s.after_window = false;
}

void OpsGenerator::Arm() {
  Shadow& s = Cur();
  if (s.armed) return s.verified ? Accept() : Window();
  Line("arm");
  s.armed = true;
  s.verified = false;
  s.after_window = false;
}

void OpsGenerator::Accept() {
  Shadow& s = Cur();
  if (!s.armed) return Arm();
  if (!s.verified) return Window();
  std::vector<int32_t> keep;
  if (Chance(40)) {
    int32_t bound = INT32_MAX;
    for (int32_t real : s.verify_real) bound = std::min(bound, real);
    keep.push_back(Range(0, bound));
  } else {
    for (int32_t real : s.verify_real) keep.push_back(Range(0, real));
  }
  Accepted(keep);
}

// Writes `accept KEEP` and updates the shadow.
void OpsGenerator::Accepted(const std::vector<int32_t>& keep) {
  Shadow& s = Cur();
  Line("accept " + JoinInts(keep));
  int32_t common = INT32_MAX;
  for (size_t r = 0; r < s.ids.size(); ++r) {
    const int32_t k = keep.size() == 1 ? keep[0] : keep[r];
    s.DropLast(r, s.verify_real[r] - k);
    common = std::min(common, s.verify_real[r] - k);
  }
  s.columns -= common;
  PeakAsIfNotWritten(&s);
  s.armed = false;
  s.verified = false;
  s.after_window = false;
}

// Writes one forward of L columns with these pads and real ids per row
// (a decode when `decode`: L = 1, no pads) and updates the shadow.
void OpsGenerator::Forward(int32_t L, const std::vector<int32_t>& left,
                           const std::vector<int32_t>& right,
                           const std::vector<std::vector<int32_t>>& ids, bool decode) {
  std::string text = decode ? "decode" : "window " + std::to_string(L);
  bool any_left = false, any_right = false;
  std::vector<int32_t> real(ids.size());
  std::string g;
  for (size_t r = 0; r < ids.size(); ++r) {
    any_left |= left[r] > 0;
    any_right |= right[r] > 0;
    real[r] = static_cast<int32_t>(ids[r].size());
    g += (r ? "/" : "") + JoinInts(ids[r]);
  }
  if (any_left) text += " left=" + JoinInts(left);
  if (any_right) text += " right=" + JoinInts(right);
  text += " ids=" + g;
  Line(text);
  Forwarded(L, real, ids, decode);
}

// Tail independence and bit-exact rollback, as an invariant inside the
// trace: two forks of the current layout reach the same tokens, fork A
// through a speculative round that rejects a tail (uniform or ragged
// keeps, possibly all or none), fork B through other chunks that write
// only the kept tokens (windows with right or left pads, decodes), or
// through a round of its own with other rejected drafts. Then `expect
// equal`: attention tokens and recurrent states must be bit-identical.
// Sometimes B's last kept token gets another id, and the expectation must
// fail. The model decides; this only makes the expectation meaningful.
void OpsGenerator::Twins() {
  if (Cur().armed) return Accept();
  if (twins_ >= 5 || budget_ < 2) return ExpectOther();
  ++twins_;
  const std::string a = "t" + std::to_string(forks_++);
  const std::string b = "t" + std::to_string(forks_++);
  Line("fork " + a);
  layouts_[a] = Cur();
  Line("fork " + b);
  layouts_[b] = Cur();
  const size_t rows = static_cast<size_t>(Rows());

  // A: arm, verify forward of drafts, accept.
  Line("use " + a);
  current_ = a;
  Line("arm");
  Cur().armed = true;
  Cur().verified = false;
  Cur().after_window = false;
  const int32_t L = Range(1, std::min(kMaxColumns, budget_ / 2));
  budget_ -= L;
  const bool decode = L == 1 && Chance(50);
  std::vector<int32_t> left(rows, 0), right(rows, 0);
  std::vector<std::vector<int32_t>> ids(rows);
  for (size_t r = 0; r < rows && !decode; ++r) {
    const int32_t pads = Chance(30) ? Range(0, L) : 0;
    (Cur().Count(r) == 0 && Chance(50) ? left : right)[r] = pads;
  }
  for (size_t r = 0; r < rows; ++r) {
    for (int32_t j = left[r]; j < L - right[r]; ++j) ids[r].push_back(Range(0, 40));
  }
  Forward(L, left, right, ids, decode);
  std::vector<int32_t> keep(rows);
  for (size_t r = 0; r < rows; ++r) {
    keep[r] = Range(0, static_cast<int32_t>(ids[r].size()));
  }
  if (Chance(40)) keep.assign(1, *std::min_element(keep.begin(), keep.end()));
  Accepted(keep);
  std::vector<std::vector<int32_t>> kept(rows);
  for (size_t r = 0; r < rows; ++r) {
    const size_t k = static_cast<size_t>(keep.size() == 1 ? keep[0] : keep[r]);
    kept[r].assign(ids[r].begin(), ids[r].begin() + static_cast<std::ptrdiff_t>(k));
  }
  const bool differ = Chance(10);
  if (differ) {  // B's last kept token of one row gets another id
    for (auto& row : kept) {
      if (!row.empty()) {
        row.back() += 41;
        break;
      }
    }
  }

  // B: the kept tokens only.
  Line("use " + b);
  current_ = b;
  int32_t most = 0;
  for (const auto& row : kept) most = std::max(most, static_cast<int32_t>(row.size()));
  if (Chance(35) && budget_ >= std::max(most, 1)) {
    // A round of its own: the kept tokens, then other drafts, then accept.
    Line("arm");
    Cur().armed = true;
    Cur().verified = false;
    Cur().after_window = false;
    const int32_t L2 = Range(std::max(most, 1), std::min(kMaxColumns, budget_));
    budget_ -= L2;
    std::vector<std::vector<int32_t>> drafts(rows);
    std::vector<int32_t> keep2(rows), zero(rows, 0), pads(rows, 0);
    for (size_t r = 0; r < rows; ++r) {
      drafts[r] = kept[r];
      const int32_t room = L2 - static_cast<int32_t>(kept[r].size());
      pads[r] = Chance(30) ? Range(0, room) : 0;
      for (int32_t j = 0; j < room - pads[r]; ++j) drafts[r].push_back(Range(0, 40));
      keep2[r] = static_cast<int32_t>(kept[r].size());
    }
    Forward(L2, zero, pads, drafts, false);
    Accepted(keep2);
  } else {
    // Chunks: row r writes its next min(c, remaining) kept tokens, padded
    // to c columns (left pads while the row is empty, else right pads).
    std::vector<size_t> done(rows, 0);
    for (int32_t rest = most; rest > 0 && budget_ > 0;) {
      const int32_t c = Range(1, std::min(rest, budget_));
      budget_ -= c;
      rest -= c;
      std::vector<int32_t> l(rows, 0), rt(rows, 0);
      std::vector<std::vector<int32_t>> chunk(rows);
      bool all_full = true;
      for (size_t r = 0; r < rows; ++r) {
        const size_t n = std::min(static_cast<size_t>(c), kept[r].size() - done[r]);
        chunk[r].assign(kept[r].begin() + static_cast<std::ptrdiff_t>(done[r]),
                        kept[r].begin() + static_cast<std::ptrdiff_t>(done[r] + n));
        done[r] += n;
        const int32_t pad = c - static_cast<int32_t>(n);
        all_full = all_full && pad == 0;
        (Cur().Count(r) == 0 && Chance(50) ? l : rt)[r] = pad;
      }
      Forward(c, l, rt, chunk, c == 1 && all_full && Chance(50));
    }
  }
  Line("expect equal " + a);
  if (Chance(30)) {
    Line("use " + a);
    current_ = a;
    Line("expect equal " + b);
  }
}

// join, filter or extract, mostly valid.
void OpsGenerator::Batch() {
  Shadow& s = Cur();
  if (s.armed) return Accept();
  switch (Range(0, 2)) {
    case 0: {  // join another layout, not growing past 8 rows
      std::vector<std::string> names;
      for (const auto& entry : layouts_) {
        if (entry.first != current_ && !entry.second.armed &&
            entry.second.ids.size() + s.ids.size() <= 8) {
          names.push_back(entry.first);
        }
      }
      if (names.empty()) return Fork();
      const std::string name =
          names[static_cast<size_t>(Range(0, static_cast<int32_t>(names.size()) - 1))];
      const Shadow b = layouts_[name];
      Line("join " + name);
      s.ids.insert(s.ids.end(), b.ids.begin(), b.ids.end());
      s.columns = std::max(s.columns, b.columns);
      s.peak = std::max(s.peak, b.peak);
      s.written = s.written || b.written;
      s.batched = true;
      break;
    }
    case 1: {  // filter: each row kept with probability 1/2, at least one
      std::vector<int32_t> keep;
      std::vector<std::vector<int32_t>> ids;
      for (int32_t r = 0; r < Rows(); ++r) {
        if (Chance(50)) {
          keep.push_back(r);
          ids.push_back(s.ids[static_cast<size_t>(r)]);
        }
      }
      if (keep.empty()) {
        keep.push_back(Rows() - 1);
        ids.push_back(s.ids.back());
      }
      Line("filter " + JoinInts(keep));
      s.ids = ids;
      break;
    }
    default: {  // extract: a single-row layout fed only that row's tokens
      const int32_t r = Range(0, Rows() - 1);
      const std::string name = "x" + std::to_string(forks_++);
      Line("extract " + std::to_string(r) + " as " + name);
      Shadow e;
      e.ids.push_back(s.ids[static_cast<size_t>(r)]);
      e.written = s.written;
      e.columns = e.peak = e.peak_before = e.Count(0);
      layouts_[name] = e;
      return;
    }
  }
  s.has_last = false;
  s.after_window = false;
}

// Through the persistence codec and back: a change, nothing else.
void OpsGenerator::Reload() {
  Line("reload");
  Cur().after_window = false;
}

void OpsGenerator::Fork() {
  const std::string name = "f" + std::to_string(forks_++);
  Line("fork " + name);
  layouts_[name] = Cur();
}

void OpsGenerator::Use() {
  std::vector<std::string> names;
  for (const auto& entry : layouts_) names.push_back(entry.first);
  current_ = names[static_cast<size_t>(Range(0, static_cast<int32_t>(names.size()) - 1))];
  Line("use " + current_);
}

}  // namespace kvspec::testing
