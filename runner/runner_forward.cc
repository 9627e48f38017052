// Forwards and read-back: `window` and `decode` run on the current layout
// with the contents of trace/values.h; then every query's visible set is
// recovered from the bytes stored in the slots its mask admits.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvspec/runner/runner_internal.h"
#include "kvspec/trace/values.h"

namespace kvspec::trace::runner_internal {

Outcome Runner::Forward(const Statement& st, const WindowOp& w, bool decode) {
  Layout& layout = Cur();
  ForwardColumns cols;
  if (Outcome o = PlanColumns(w, decode, &cols); o.code) return o;
  const std::vector<int32_t> before = layout.positions();
  std::vector<std::vector<int32_t>> ids;  // of each row's real tokens
  if (Outcome o = TokenIds(w, cols, before, &ids); o.code) return o;
  if (Outcome o = ForwardBudget(cols); o.code) return o;

  // The buffers and lines are the runner's, reused: nothing else runs
  // between here and the end of this function (`expect error` runs its
  // operation through here too, one at a time).
  // Large ones are freed after the forward (ReleaseLargeBuffers), as they
  // were when each forward had its own: the budget does not count them.
  FillInputs(cols, before, ids, &buffers_);
  Status s = layout.Forward(cols, buffers_.io);
  if (!s.ok()) {
    ReleaseLargeBuffers();
    return Outcome::Refused(s.message());
  }

  // Remember what was written, then read back what every query saw.
  RememberWritten(cols, before, ids, buffers_);
  LastForward last = ReadBack(cols, before, buffers_, &lines_);
  Last() = std::move(last);
  PrintForward(st, lines_);
  ReleaseLargeBuffers();
  return {};
}

void Runner::ReleaseLargeBuffers() {
  constexpr size_t kKept = size_t{1} << 20;  // bytes
  size_t bytes = 0;
  for (const auto* per_layer : {&buffers_.q, &buffers_.k, &buffers_.v, &buffers_.o, &buffers_.x,
                                &buffers_.gate, &buffers_.beta}) {
    for (const std::vector<float>& b : *per_layer) bytes += b.capacity() * sizeof(float);
  }
  if (bytes > kKept) buffers_ = ForwardBuffers();
  size_t tag_bytes = 0;
  for (const auto& row : slot_tags_) tag_bytes += row.capacity() * sizeof(row[0]);
  if (tag_bytes > kKept) slot_tags_ = SlotTags::Rows();
  if (lines_.sees.capacity() > kKept) std::string().swap(lines_.sees);
  if (lines_.outs.capacity() > kKept) std::string().swap(lines_.outs);
}

// The forward's columns: L (1 for a decode) with the given paddings, as the
// layout accepts them.
Outcome Runner::PlanColumns(const WindowOp& w, bool decode, ForwardColumns* cols) {
  const int rows = Cur().rows();
  *cols = ForwardColumns::Dense(rows, decode ? 1 : w.columns, decode);
  if (w.has_left) {
    if (w.left.size() != static_cast<size_t>(rows)) {
      return Outcome::Refused("left= has " + std::to_string(w.left.size()) +
                              " values for " + std::to_string(rows) + " rows");
    }
    cols->left = w.left;
  }
  if (w.has_right) {
    if (w.right.size() != static_cast<size_t>(rows)) {
      return Outcome::Refused("right= has " + std::to_string(w.right.size()) +
                              " values for " + std::to_string(rows) + " rows");
    }
    cols->right = w.right;
  }
  Status check = Cur().CheckForward(*cols);
  if (!check.ok()) return Outcome::Refused(check.message());
  return {};
}

// The ids of each row's real tokens: as given, or their positions.
Outcome Runner::TokenIds(const WindowOp& w, const ForwardColumns& cols,
                         const std::vector<int32_t>& before,
                         std::vector<std::vector<int32_t>>* ids) {
  const int rows = Cur().rows();
  ids->assign(static_cast<size_t>(rows), {});
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
      (*ids)[r] = w.ids[r];
    } else {
      for (int32_t j = 0; j < real; ++j) (*ids)[r].push_back(before[r] + j);
    }
    if (static_cast<int64_t>(before[r]) + real > kMaxTokensPerRow) {
      return Outcome::Limit("row " + std::to_string(r) + " would exceed " +
                            std::to_string(kMaxTokensPerRow) + " tokens");
    }
  }
  return {};
}

// Contents of every real column; pad columns hold PadValue(), outputs 0.
void Runner::FillInputs(const ForwardColumns& cols, const std::vector<int32_t>& before,
                        const std::vector<std::vector<int32_t>>& ids,
                        ForwardBuffers* buffers) {
  const int rows = Cur().rows();
  const size_t L = static_cast<size_t>(cols.columns);
  const size_t nl = Cur().size();
  ForwardBuffers& b = *buffers;
  for (auto* per_layer : {&b.q, &b.k, &b.v, &b.o, &b.x, &b.gate, &b.beta}) {
    per_layer->resize(nl);
  }
  b.io.resize(nl);
  for (size_t l = 0; l < nl; ++l) {
    const LayerConfig& d = p_.layers[l];
    if (d.kind == CacheKind::kSsm) {
      // Per token: x[C], then a[Hv] and b[Hv] turned into gate and beta.
      const size_t C = d.SsmChannels();
      const size_t hv = static_cast<size_t>(d.heads);
      b.x[l].assign(static_cast<size_t>(rows) * L * C, PadValue());
      b.gate[l].assign(static_cast<size_t>(rows) * L * hv, PadValue());
      b.beta[l].assign(b.gate[l].size(), PadValue());
      b.o[l].assign(static_cast<size_t>(rows) * L * hv * d.dv, 0.0f);
      for (int r = 0; r < rows; ++r) {
        for (int32_t j = 0; j < cols.Real(r); ++j) {
          const size_t c = r * L + static_cast<size_t>(cols.left[r] + j);
          RecurrentToken(static_cast<int>(l), ids[r][j], before[r] + j, C, hv, &b.x[l][c * C],
                         &b.gate[l][c * hv], &b.beta[l][c * hv]);
        }
      }
      SsmIO ssm;
      ssm.conv_weights = conv_weights_[l].data();
      ssm.packed_conv_weights = packed_conv_weights_[l].data();
      ssm.x = b.x[l].data();
      ssm.gate = b.gate[l].data();
      ssm.beta = b.beta[l].data();
      ssm.y = b.o[l].data();
      b.io[l] = AttentionIO(ssm);
      continue;
    }
    // k and v [rows][L][heads][dim]; q and o [rows][L][q_heads][dim] only
    // when the outputs are observed (`out` lines, `expect out`): otherwise
    // the forward only appends (no attention is computed that nobody reads;
    // what each query sees comes from its mask and the stored bytes).
    const size_t hd = static_cast<size_t>(d.heads) * d.dim;
    const size_t qd = static_cast<size_t>(d.QueryHeads()) * d.dim;
    const size_t n = static_cast<size_t>(rows) * L;
    if (opt_.values) {
      b.q[l].assign(n * qd, PadValue());
      b.o[l].assign(n * qd, 0.0f);
    } else {
      b.q[l].resize(qd);  // one token's q, written and not read
    }
    b.k[l].assign(n * hd, PadValue());
    b.v[l].assign(n * hd, PadValue());
    for (int r = 0; r < rows; ++r) {
      for (int32_t j = 0; j < cols.Real(r); ++j) {
        const size_t c = r * L + static_cast<size_t>(cols.left[r] + j);
        float* q = opt_.values ? &b.q[l][c * qd] : b.q[l].data();
        AttentionToken(static_cast<int>(l), ids[r][j], before[r] + j, d.QueryHeads(), d.heads,
                       d.dim, q, &b.k[l][c * hd], &b.v[l][c * hd]);
      }
    }
    b.io[l] = opt_.values ? AttentionIO{b.q[l].data(), b.k[l].data(), b.v[l].data(),
                                        b.o[l].data()}
                          : AttentionIO{nullptr, b.k[l].data(), b.v[l].data(), nullptr};
  }
}

// Tells the index which token each attention layer's new k/v bytes are.
void Runner::RememberWritten(const ForwardColumns& cols, const std::vector<int32_t>& before,
                             const std::vector<std::vector<int32_t>>& ids,
                             const ForwardBuffers& buffers) {
  const size_t L = static_cast<size_t>(cols.columns);
  for (size_t l = 0; l < Cur().size(); ++l) {
    const LayerConfig& d = p_.layers[l];
    if (d.kind == CacheKind::kSsm) continue;
    const size_t hd = static_cast<size_t>(d.heads) * d.dim;
    for (int r = 0; r < Cur().rows(); ++r) {
      for (int32_t j = 0; j < cols.Real(r); ++j) {
        const size_t at = (r * L + static_cast<size_t>(cols.left[r] + j)) * hd;
        index_.Remember(static_cast<int>(l), ids[r][j], before[r] + j, &buffers.k[l][at],
                        &buffers.v[l][at], hd, d.kv, d.dim);
      }
    }
  }
}

// What every real query saw (attention layers: the tags of the slots its
// mask admits, sorted) and computed, with the `sees` and `out` lines.
LastForward Runner::ReadBack(const ForwardColumns& cols, const std::vector<int32_t>& before,
                             const ForwardBuffers& buffers, ForwardLines* lines) {
  const Layout& layout = Cur();
  const size_t L = static_cast<size_t>(cols.columns);
  LastForward last;
  last.valid = true;
  lines->sees.clear();
  lines->outs.clear();
  std::string head;
  std::vector<Tag> seen;
  for (size_t l = 0; l < layout.size(); ++l) {
    const LayerConfig& d = p_.layers[l];
    const AttentionCache* cache = layout.attention(l);
    const Mask* mask = cache ? layout.LastMask(l) : nullptr;
    const KvView view = cache ? cache->View() : KvView();
    // Each slot's tag is recovered once per forward, not once per query.
    std::optional<SlotTags> tags;
    if (cache) tags.emplace(index_, static_cast<int>(l), view, *mask, &slot_tags_);
    // Values per query (attention: all heads' o) or token (recurrent: y).
    const size_t per = cache ? static_cast<size_t>(d.QueryHeads()) * d.dim
                             : static_cast<size_t>(d.heads) * d.dv;
    for (int r = 0; r < layout.rows(); ++r) {
      for (int32_t j = 0; j < cols.Real(r); ++j) {
        const int32_t col = cols.left[r] + j;
        const int32_t pos = before[r] + j;
        // "LAYER rR pP:", built in place (this runs for every query).
        head.assign(d.name);
        head += " r";
        AppendInt(&head, r);
        head += " p";
        AppendInt(&head, pos);
        head += ':';
        const QueryKey key{static_cast<int>(l), r, pos};
        if (cache) {
          tags->Seen(r, col, &seen);  // reused unless kept
          std::string& line = lines->sees;
          line += "sees ";
          line += head;
          AppendTags(&line, seen);
          line += '\n';
          if (keep_sees_) last.sees[key] = std::move(seen);
          // Printed as they come once they pass 1 MiB: the `sees` lines are
          // printed first, in this order, whatever follows (PrintForward
          // prints the rest), and the text of a large read-back is not all
          // held at once.
          if (!opt_.emit && line.size() > (size_t{1} << 20)) {
            out_ << line;
            line.clear();
          }
        }
        if (cache && !opt_.values) continue;  // no attention outputs computed
        const float* ov = &buffers.o[l][(r * L + static_cast<size_t>(col)) * per];
        if (keep_outs_) {
          last.outs[key].assign(ov, ov + per);
        } else {
          last.unkept_out_bytes += 64 + per * sizeof(float);  // as LastBytes counts a kept one
        }
        if (!opt_.values) continue;  // `out` lines are printed only with values
        std::string& line = lines->outs;
        line += "out ";
        line += head;
        for (size_t i = 0; i < per; ++i) {
          line += ' ';
          AppendValue(&line, ov[i]);
        }
        line += '\n';
      }
    }
  }
  return last;
}

}  // namespace kvspec::trace::runner_internal
