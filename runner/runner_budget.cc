// The runner's budgets (RunOptions::max_bytes and max_work): what each
// allocation a trace can cause costs, computed from the LayerConfig shapes
// and checked before anything is allocated, and the work each forward does.
#include <algorithm>
#include <cstdint>
#include <string>

#include "kvspec/runner/runner_internal.h"

namespace kvspec::trace::runner_internal {
namespace {

constexpr size_t kF = sizeof(float);

// Floats of one row's recurrent state: conv [K-1][C] and S [Hv][dv][dk].
size_t SsmRowFloats(const LayerConfig& d) {
  return static_cast<size_t>(d.conv - 1) * d.SsmChannels() +
         static_cast<size_t>(d.heads) * d.dv * d.dk;
}

// Ceiling MiB of `bytes`, for messages.
uint64_t MiB(uint64_t bytes) { return (bytes >> 20) + ((bytes & ((uint64_t{1} << 20) - 1)) != 0); }

}  // namespace

// Layout::Create: an ssm layer double-buffers every row's state; an
// attention layer, ring or not, starts empty (a ring grows to its capacity
// at its first forward, which ForwardBudget counts).
uint64_t CreateBytes(int rows, const LayerConfig& d) {
  const uint64_t r = static_cast<uint64_t>(rows);
  return d.kind == CacheKind::kSsm ? 2 * r * SsmRowFloats(d) * kF : 0;
}

// One forward's inputs and outputs (FillInputs): x/gate/beta/y, or k/v and,
// when attention outputs are observed (`values`), q/o.
uint64_t ForwardIoBytes(int rows, int32_t L, const LayerConfig& d, bool values) {
  const uint64_t n = static_cast<uint64_t>(rows) * static_cast<uint64_t>(L);
  if (d.kind == CacheKind::kSsm) {
    return n * (d.SsmChannels() + 2 * static_cast<uint64_t>(d.heads) +
                static_cast<uint64_t>(d.heads) * d.dv) * kF;
  }
  const uint64_t q_heads = values ? static_cast<uint64_t>(d.QueryHeads()) : 0;
  return 2 * n * (static_cast<uint64_t>(d.heads) + q_heads) * d.dim * kF;
}

// The ssm cache's round records: every verify token's inputs
// (SsmCacheBase::RecordFloats: x, prepared q and k, v, the gate, beta).
uint64_t RoundRecordBytes(uint64_t tokens, const SsmShape& s) {
  const uint64_t hk = static_cast<uint64_t>(s.key_heads) * s.dk;
  const uint64_t hv = static_cast<uint64_t>(s.value_heads);
  return tokens * (s.Channels() + 2 * hk + hv * s.dv + s.GateFloats() + hv) * kF;
}

// (query, slot) pairs an attention layer's real queries may see.
uint64_t SeenPairs(const ForwardColumns& cols, const std::vector<int32_t>& before,
                   const LayerConfig& d) {
  const uint64_t window = d.window > 0 ? static_cast<uint64_t>(d.window) : ~uint64_t{0};
  uint64_t pairs = 0;
  for (size_t r = 0; r < before.size(); ++r) {
    const uint64_t b = static_cast<uint64_t>(before[r]);
    const uint64_t real = static_cast<uint64_t>(cols.Real(r));
    // sum over p in (b, b + real] of min(window, p)
    const uint64_t split = std::clamp(window, b, b + real);
    pairs += (split * (split + 1) - b * (b + 1)) / 2 + (b + real - split) * window;
  }
  return pairs;
}

// What the read-back holds: a tag and its printed text per pair, and every
// query's outputs with their text (attention outputs only when observed).
uint64_t ReadBackBytes(uint64_t pairs, uint64_t queries, const LayerConfig& d, bool values) {
  const uint64_t per = d.kind == CacheKind::kSsm ? static_cast<uint64_t>(d.heads) * d.dv
                       : values ? static_cast<uint64_t>(d.QueryHeads()) * d.dim
                                : 0;
  return pairs * (sizeof(Tag) + 24) + queries * per * (kF + 16);
}

// One content index entry (hash, tag, and the hash table's node).
uint64_t IndexBytes(uint64_t entries) { return entries * 64; }

// What a layout's last forward holds.
uint64_t LastBytes(const LastForward& last) {
  uint64_t bytes = 0;
  for (const auto& entry : last.sees) bytes += 64 + entry.second.size() * sizeof(Tag);
  for (const auto& entry : last.outs) bytes += 64 + entry.second.size() * kF;
  return bytes + last.unkept_out_bytes;
}

uint64_t Runner::HeldBytes() const {
  uint64_t total = IndexBytes(index_.size());
  for (const auto& named : layouts_) {
    total += named.second.layout->allocatedBytes() + LastBytes(named.second.last);
  }
  return total;
}

Outcome Runner::MemoryLimit(uint64_t needed, const std::string& what) const {
  if (needed <= opt_.max_bytes) return {};
  return Outcome::Limit(what + " needs " + std::to_string(MiB(needed)) + " MiB (budget " +
                        std::to_string(MiB(opt_.max_bytes)) + " MiB, --max-memory)");
}

Outcome Runner::CreateBudget(int* line) const {
  uint64_t total = 0;
  for (size_t l = 0; l < p_.layers.size(); ++l) {
    total += CreateBytes(p_.rows, p_.layers[l]);
    *line = p_.layer_lines[l];
    const std::string what = "the layers up to '" + p_.layers[l].name + "'";
    if (Outcome o = MemoryLimit(total, what); o.code) return o;
  }
  return {};
}

Outcome Runner::Budget(uint64_t more, const char* what) const {
  const uint64_t held = HeldBytes();
  // `more` may be the largest value (a size core/ could not compute).
  return MemoryLimit(more > UINT64_MAX - held ? UINT64_MAX : held + more, what);
}

// Memory: what is held, plus the new storage of each attention layer that
// grows (its old storage, already held, stays alive while it is copied
// over; a layer that does not grow and a recurrent state allocate
// nothing), the inputs and outputs, the round records, the read-back and
// the index's new entries. Work: the attention's multiply-adds (q.k and
// p.v per pair and query head, when its outputs are observed) and mask
// scan, the recurrent steps, the bytes read back and 64 per reported tag.
Outcome Runner::ForwardBudget(const ForwardColumns& cols) {
  const Layout& layout = Cur();
  const std::vector<int32_t> before = layout.positions();
  const int rows = layout.rows();
  uint64_t real = 0;
  for (int r = 0; r < rows; ++r) real += static_cast<uint64_t>(cols.Real(r));
  uint64_t memory = HeldBytes();
  uint64_t work = 0;
  for (size_t l = 0; l < layout.size(); ++l) {
    const LayerConfig& d = p_.layers[l];
    memory += ForwardIoBytes(rows, cols.columns, d, opt_.values);
    if (d.kind == CacheKind::kSsm) {
      if (layout.armed()) memory += RoundRecordBytes(real, layout.recurrent(l)->shape());
      memory += ReadBackBytes(0, real, d, opt_.values);
      work += real * (4 * static_cast<uint64_t>(d.heads) * d.dv * d.dk +
                      d.SsmChannels() * static_cast<uint64_t>(d.conv));
      continue;
    }
    const AttentionCache* cache = layout.attention(l);
    const uint64_t slot_bytes = cache->bytesPerToken() + sizeof(int32_t);
    const uint64_t slots_bytes = cache->BytesAfterAppend(cols.columns);
    const uint64_t slots = slots_bytes / slot_bytes / static_cast<uint64_t>(rows);
    if (slots_bytes != cache->allocatedBytes()) memory += slots_bytes;
    const uint64_t pairs = SeenPairs(cols, before, d);
    memory += ReadBackBytes(pairs, real, d, opt_.values) + IndexBytes(real);
    const uint64_t attention = opt_.values ? 2 * static_cast<uint64_t>(d.QueryHeads()) * d.dim : 0;
    work += pairs * attention + real * slots + slots_bytes + pairs * 64;
  }
  if (Outcome o = MemoryLimit(memory, "the forward"); o.code) return o;
  work_ += work;
  if (work_ > opt_.max_work) {
    return Outcome::Limit("work of the trace up to here needs " +
                          std::to_string(work_ / 1000000) + " M operations (budget " +
                          std::to_string(opt_.max_work / 1000000) + " M, --max-work)");
  }
  return {};
}

}  // namespace kvspec::trace::runner_internal
