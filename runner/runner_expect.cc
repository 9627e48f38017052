// Expectations: each compares what it states with the current layout or
// its last forward. A mismatch is reported (exit 1) and the run goes on; a
// statement the state cannot answer (a list of the wrong length, an unknown
// name) is a refusal and stops it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kvspec/runner/runner_internal.h"

namespace kvspec::trace::runner_internal {

void Runner::Failed(const Statement& st, const std::string& expected, const std::string& got) {
  err_ << p_.file << ":" << st.line << ": expected " << expected << " got " << got << "\n";
  status_ = std::max(status_, 1);
}

Outcome Runner::CheckSees(const Statement& st, const ExpectSees& e) {
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

Outcome Runner::CheckOut(const Statement& st, const ExpectOut& e) {
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

Outcome Runner::CheckPositions(const Statement& st, const ExpectPositions& e) {
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

Outcome Runner::CheckError(const Statement& st, const ExpectError& e) {
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

Outcome Runner::CheckEqual(const Statement& st, const ExpectEqual& e) {
  auto it = layouts_.find(e.name);
  if (it == layouts_.end()) {
    return Outcome::Refused("expect equal: no layout named '" + e.name + "'");
  }
  std::string diff = Difference(Cur(), *it->second.layout);
  if (!diff.empty()) Failed(st, "equal " + e.name, diff);
  return {};
}

Outcome Runner::CheckTrimmable(const Statement& st, const ExpectTrimmable& e) {
  const bool got = Cur().cache(e.layer).isTrimmable();
  if (got != e.yes) {
    Failed(st, "trimmable " + p_.layers[e.layer].name + " " + (e.yes ? "yes" : "no"),
           got ? "yes" : "no");
  }
  return {};
}

Outcome Runner::CheckKind(const Statement& st, const ExpectKind& e) {
  const std::string got = Cur().cache(e.layer).kind();
  if (got != e.kind_string) {
    Failed(st, "kind " + p_.layers[e.layer].name + " " + e.kind_string, got);
  }
  return {};
}

Outcome Runner::CheckBytesPerToken(const Statement& st, const ExpectBytesPerToken& e) {
  const int64_t got = static_cast<int64_t>(Cur().cache(e.layer).bytesPerToken());
  if (got != e.bytes) {
    Failed(st, "bytes_per_token " + p_.layers[e.layer].name + " " + std::to_string(e.bytes),
           std::to_string(got));
  }
  return {};
}

// The first observable difference between two layouts, or "". Both have
// the header's layer list (runner_internal.h), so layer l is the same kind
// in both.
std::string Difference(const Layout& a, const Layout& b) {
  if (a.rows() != b.rows()) {
    return "rows " + std::to_string(a.rows()) + " vs " + std::to_string(b.rows());
  }
  if (a.positions() != b.positions()) {
    return "positions " + JoinInts(a.positions()) + " vs " + JoinInts(b.positions());
  }
  for (size_t l = 0; l < a.size(); ++l) {
    if (const SsmCacheBase* ra = a.recurrent(l)) {
      const SsmCacheBase* rb = b.recurrent(l);
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
    const KvView va = ca->View(), vb = cb->View();
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
          same = va.type() == vb.type() &&
                 std::memcmp(va.KeyBytes(r, h, xa), vb.KeyBytes(r, h, xb), va.RowBytes()) == 0 &&
                 std::memcmp(va.ValueBytes(r, h, xa), vb.ValueBytes(r, h, xb), va.RowBytes()) == 0;
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

}  // namespace kvspec::trace::runner_internal
