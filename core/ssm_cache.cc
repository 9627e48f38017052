#include "kvspec/core/ssm_cache.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>

#include "kvspec/core/invariants.h"
#include "kvspec/core/invariants_internal.h"
#include "kvspec/core/kv_cache.h"  // CheckForwardColumns
#include "kvspec/kernels/conv1d.h"

namespace kvspec {

GatedDeltaShape SsmShape::Delta() const {
  GatedDeltaShape d;
  d.value_heads = static_cast<size_t>(value_heads);
  d.key_heads = static_cast<size_t>(key_heads);
  d.dk = static_cast<size_t>(dk);
  d.dv = static_cast<size_t>(dv);
  d.gate_per_lane = gate_per_lane;
  return d;
}

namespace {
// Floats of one token's scratch: pre-conv outputs u, prepared q and k, y.
size_t ScratchFloats(const SsmShape& shape) {
  const size_t hk = static_cast<size_t>(shape.key_heads) * shape.dk;
  return shape.Channels() + 2 * hk + static_cast<size_t>(shape.value_heads) * shape.dv;
}
// Floats of the packed conv weights a Forward without SsmIO::packed_conv_weights packs.
size_t PackedFloats(const SsmShape& shape) {
  return static_cast<size_t>(shape.conv) * shape.Channels();
}
}  // namespace

SsmCacheBase::SsmCacheBase(int rows, const SsmShape& shape)
    : rows_(rows), shape_(shape),
      row_floats_(shape.ConvFloats() + shape.RecurrentFloats()),
      state_(static_cast<size_t>(rows) * 2 * row_floats_, 0.0f),
      active_(static_cast<size_t>(rows), 0),
      next_(static_cast<size_t>(rows), 0) {
  scratch_.resize(ScratchFloats(shape));
  packed_.resize(PackedFloats(shape));
}

size_t SsmCacheBase::BytesWhenBuilt(int rows, const SsmShape& shape) {
  const size_t row_floats = shape.ConvFloats() + shape.RecurrentFloats();
  return (static_cast<size_t>(rows) * 2 * row_floats + ScratchFloats(shape) +
          PackedFloats(shape)) *
         sizeof(float);
}

size_t SsmCacheBase::allocatedBytes() const {
  size_t bytes = state_.size() * sizeof(float);
  for (const auto& r : record_) bytes += r.size() * sizeof(float);
  return bytes;
}

size_t SsmCacheBase::RecordFloats() const {
  const size_t hk = static_cast<size_t>(shape_.key_heads) * shape_.dk;
  return shape_.Channels() + 2 * hk + static_cast<size_t>(shape_.value_heads) * shape_.dv +
         shape_.GateFloats() + static_cast<size_t>(shape_.value_heads);
}

Status SsmCacheBase::CheckTrim(int32_t, bool) const {
  return Status::Error("a recurrent (" + kind() +
                       ") cache is not trimmable: roll back a speculative round instead");
}

Status SsmCacheBase::trim(int32_t n, bool bypass) { return CheckTrim(n, bypass); }

void SsmCacheBase::HashState(Hasher* hasher) const {
  hasher->Value(rows_);
  hasher->Value(shape_.value_heads);
  hasher->Value(shape_.key_heads);
  hasher->Value(shape_.dk);
  hasher->Value(shape_.dv);
  hasher->Value(shape_.conv);
  hasher->Value(shape_.gate_per_lane);
  hasher->Value(columns_);
  hasher->Vector(state_);
  hasher->Vector(active_);
  hasher->Vector(next_);
  hasher->Value(armed_);
  hasher->Value(verified_);
  hasher->Vector(snapshot_);
  hasher->Vector(round_real_);
  for (const auto& r : record_) hasher->Vector(r);
}

const float* SsmCacheBase::ConvState(int row) const { return Buffer(row, active_[row]); }

const float* SsmCacheBase::RecurrentState(int row) const {
  return Buffer(row, active_[row]) + shape_.ConvFloats();
}

std::vector<float> SsmCacheBase::ConvStateTraceOrder(int row) const {
  std::vector<float> out(shape_.ConvFloats());
  ConvStateToTrace(ConvState(row), out.data(), shape_.Channels(),
                   static_cast<size_t>(shape_.conv));
  return out;
}

std::vector<float> SsmCacheBase::RecurrentStateTraceOrder(int row) const {
  std::vector<float> out(shape_.RecurrentFloats());
  GatedDeltaStateToTrace(RecurrentState(row), out.data(), shape_.Delta());
  return out;
}

uint64_t SsmCacheBase::RowStateHash(int row) const {
  Hasher h;
  const std::vector<float> conv = ConvStateTraceOrder(row);
  h.Bytes(conv.data(), conv.size() * sizeof(float));
  const std::vector<float> recurrent = RecurrentStateTraceOrder(row);
  h.Bytes(recurrent.data(), recurrent.size() * sizeof(float));
  return h.value();
}

void SsmCacheBase::BufferTraceOrder(size_t b, float* out) const {
  const size_t conv = shape_.ConvFloats();
  const size_t C = shape_.Channels(), K = static_cast<size_t>(shape_.conv);
  ConvStateToTrace(&state_[b * row_floats_], out, C, K);
  GatedDeltaStateToTrace(&state_[b * row_floats_ + conv], out + conv, shape_.Delta());
}

void SsmCacheBase::StatesFromTraceOrder() {
  std::vector<float> in(row_floats_);
  const size_t conv = shape_.ConvFloats();
  const size_t C = shape_.Channels(), K = static_cast<size_t>(shape_.conv);
  for (size_t b = 0; b < static_cast<size_t>(rows_) * 2; ++b) {
    float* buffer = &state_[b * row_floats_];
    std::copy(buffer, buffer + row_floats_, in.begin());
    ConvStateFromTrace(in.data(), buffer, C, K);
    GatedDeltaStateFromTrace(in.data() + conv, buffer + conv, shape_.Delta());
  }
}

Status SsmCacheBase::CheckForward(const ForwardColumns& cols) const {
  if (armed_ && verified_) {
    return Status::Error("the round's verify forward has run: commit or roll back first");
  }
  return CheckForwardColumns(cols, next_, columns_);
}

void SsmCacheBase::Step(const float* src, float* dst, const float* w, const float* x,
                        const float* gate, const float* beta, float* y,
                        std::vector<float>* rec, ThreadPool* pool) {
  const size_t C = shape_.Channels();
  const size_t conv_floats = shape_.ConvFloats();
  const size_t hk = static_cast<size_t>(shape_.key_heads) * shape_.dk;
  const size_t hv = static_cast<size_t>(shape_.value_heads) * shape_.dv;
  const GatedDeltaShape delta = shape_.Delta();
  float* u = scratch_.data();
  float* q = u + C;
  float* k = q + hk;
  const float* v = u + 2 * hk;
  if (reference_) {
    ConvStepReference(w, src, dst, x, u, C, static_cast<size_t>(shape_.conv));
    PrepareQueryKeyReference(u, u + hk, q, k, delta);
    GatedDeltaStepReferenceKernelOrder(src + conv_floats, dst + conv_floats, q, k, v, gate, beta,
                                       y, delta);
  } else {
    ConvStep(w, src, dst, x, u, C, static_cast<size_t>(shape_.conv));
    PrepareQueryKey(u, u + hk, q, k, delta);
    GatedDeltaStep(src + conv_floats, dst + conv_floats, q, k, v, gate, beta, y, delta, pool);
  }
  if (rec) {
    rec->insert(rec->end(), x, x + C);
    rec->insert(rec->end(), q, q + hk);
    rec->insert(rec->end(), k, k + hk);
    rec->insert(rec->end(), v, v + hv);
    rec->insert(rec->end(), gate, gate + shape_.GateFloats());
    rec->insert(rec->end(), beta, beta + shape_.value_heads);
  }
}

void SsmCacheBase::Replay(const float* src, float* dst, const float* rec) {
  const size_t C = shape_.Channels();
  const size_t conv_floats = shape_.ConvFloats();
  const size_t hk = static_cast<size_t>(shape_.key_heads) * shape_.dk;
  const size_t hv = static_cast<size_t>(shape_.value_heads) * shape_.dv;
  const float* x = rec;
  const float* q = x + C;
  const float* k = q + hk;
  const float* v = k + hk;
  const float* gate = v + hv;
  const float* beta = gate + shape_.GateFloats();
  ConvShiftState(src, dst, x, C, static_cast<size_t>(shape_.conv));
  float* y = scratch_.data() + C + 2 * hk;  // discarded
  if (reference_) {
    GatedDeltaStepReferenceKernelOrder(src + conv_floats, dst + conv_floats, q, k, v, gate, beta,
                                       y, shape_.Delta());
  } else {
    GatedDeltaStep(src + conv_floats, dst + conv_floats, q, k, v, gate, beta, y, shape_.Delta());
  }
}

void SsmCacheBase::ReserveForward(const ForwardColumns& cols, ForwardSpace* space) const {
  if (!armed_) return;
  space->round_real.assign(static_cast<size_t>(rows_), 0);
  space->record.assign(static_cast<size_t>(rows_), {});
  for (int r = 0; r < rows_; ++r) {
    space->record[r].reserve(static_cast<size_t>(cols.Real(r)) * RecordFloats());
  }
}

Status SsmCacheBase::Forward(const ForwardColumns& cols, const SsmIO& io) {
  KVSPEC_RETURN_IF_ERROR(CheckForward(cols));
  ForwardSpace space;
  ReserveForward(cols, &space);
  return ForwardReserved(cols, io, &space);
}

Status SsmCacheBase::ForwardReserved(const ForwardColumns& cols, const SsmIO& io,
                                     ForwardSpace* space) {
  KVSPEC_RETURN_IF_ERROR(CheckForward(cols));
  if (armed_ && space->record.size() != static_cast<size_t>(rows_)) {
    return Status::Error("internal: forward space reserved for another round");
  }
  const size_t L = static_cast<size_t>(cols.columns);
  const size_t C = shape_.Channels();
  const size_t gf = shape_.GateFloats();
  const size_t hv = static_cast<size_t>(shape_.value_heads);
  const size_t yf = hv * shape_.dv;
  const bool verify = armed_;
  if (verify) {
    round_real_.swap(space->round_real);
    record_.swap(space->record);
  }
  // Packed weights: the caller's, or packed here before the first real token.
  const float* w = io.packed_conv_weights;
  for (int r = 0; r < rows_; ++r) {
    bool first = true;
    for (size_t i = 0; i < L; ++i) {
      const size_t at = r * L + i;
      const int32_t col = static_cast<int32_t>(i);
      float* y = io.y ? io.y + at * yf : nullptr;
      if (col < cols.left[r] || col >= cols.columns - cols.right[r]) {
        if (y) std::fill(y, y + yf, 0.0f);  // pad: no output, no state change
        continue;
      }
      float* out = y ? y : scratch_.data() + C + 2 * static_cast<size_t>(shape_.key_heads) * shape_.dk;
      if (!w) {
        PackConvWeights(io.conv_weights, packed_.data(), C, static_cast<size_t>(shape_.conv));
        w = packed_.data();
      }
      if (verify) {
        // Read the snapshot, write the other buffer: no copy of the state.
        const int snap = snapshot_[r];
        const float* src = first ? Buffer(r, snap) : Buffer(r, 1 - snap);
        Step(src, Buffer(r, 1 - snap), w, io.x + at * C, io.gate + at * gf,
             io.beta + at * hv, out, &record_[r], io.pool);
        ++round_real_[r];
      } else {
        float* s = Buffer(r, active_[r]);
        Step(s, s, w, io.x + at * C, io.gate + at * gf, io.beta + at * hv, out,
             nullptr, io.pool);
      }
      first = false;
    }
    next_[r] += cols.Real(r);
    if (verify && round_real_[r] > 0) active_[r] = static_cast<uint8_t>(1 - snapshot_[r]);
  }
  if (verify) verified_ = true;
  columns_ += cols.columns;
  KVSPEC_ASSERT_INVARIANTS(*this, "SsmCacheBase::Forward");
  return Status::Ok();
}

Status SsmCacheBase::ArmRound() {
  if (armed_) return Status::Error("a round is already armed");
  armed_ = true;
  verified_ = false;
  snapshot_ = active_;
  round_real_.assign(static_cast<size_t>(rows_), 0);
  record_.assign(static_cast<size_t>(rows_), {});
  KVSPEC_ASSERT_INVARIANTS(*this, "SsmCacheBase::ArmRound");
  return Status::Ok();
}

Status SsmCacheBase::Commit() {
  if (!armed_) return Status::Error("commit without an armed round");
  armed_ = false;
  verified_ = false;
  snapshot_.clear();
  round_real_.clear();
  record_.clear();
  KVSPEC_ASSERT_INVARIANTS(*this, "SsmCacheBase::Commit (also ends a rollback)");
  return Status::Ok();
}

Status SsmCacheBase::CheckRollback(const std::vector<int32_t>& keep) const {
  if (!armed_) return Status::Error("rollback without an armed round");
  if (!verified_) return Status::Error("rollback before the round's verify forward");
  if (keep.size() != static_cast<size_t>(rows_)) {
    return Status::Error("rollback takes one keep count per row (" + std::to_string(rows_) +
                         "), got " + std::to_string(keep.size()));
  }
  for (int r = 0; r < rows_; ++r) {
    if (keep[r] < 0 || keep[r] > round_real_[r]) {
      return Status::Error("rollback: row " + std::to_string(r) + " keeps " +
                           std::to_string(keep[r]) + " of a round of " +
                           std::to_string(round_real_[r]) + " tokens");
    }
  }
  return Status::Ok();
}

Status SsmCacheBase::Rollback(const std::vector<int32_t>& keep) {
  KVSPEC_RETURN_IF_ERROR(CheckRollback(keep));
  const size_t per_token = RecordFloats();
  int32_t common = round_real_[0] - keep[0];
  for (int r = 0; r < rows_; ++r) {
    const int32_t drop = round_real_[r] - keep[r];
    common = std::min(common, drop);
    next_[r] -= drop;
    if (drop == 0) continue;  // full accept for this row: the result stands
    const int snap = snapshot_[r];
    active_[r] = static_cast<uint8_t>(snap);
    if (keep[r] == 0) continue;  // the snapshot itself
    // Replay the kept tokens from the snapshot into the other buffer.
    float* dst = Buffer(r, 1 - snap);
    for (int32_t t = 0; t < keep[r]; ++t) {
      Replay(t == 0 ? Buffer(r, snap) : dst, dst, &record_[r][t * per_token]);
    }
    active_[r] = static_cast<uint8_t>(1 - snap);
  }
  columns_ -= common;
  return Commit();
}

bool SsmCacheBase::SameShape(const SsmCacheBase& o) const {
  return shape_.value_heads == o.shape_.value_heads && shape_.key_heads == o.shape_.key_heads &&
         shape_.dk == o.shape_.dk && shape_.dv == o.shape_.dv && shape_.conv == o.shape_.conv &&
         shape_.gate_per_lane == o.shape_.gate_per_lane;
}

void SsmCacheBase::GatherRows(const std::vector<RowSource>& sources, int64_t columns) {
  for (int r = 0; r < rows_; ++r) {
    const SsmCacheBase& src = *sources[r].cache;
    const int sr = sources[r].row;
    std::memcpy(Buffer(r, 0), src.Buffer(sr, src.active_[sr]), row_floats_ * sizeof(float));
    std::fill(Buffer(r, 1), Buffer(r, 1) + row_floats_, 0.0f);
    active_[r] = 0;
    next_[r] = src.next_[sr];
  }
  columns_ = columns;
  KVSPEC_ASSERT_INVARIANTS(*this, "SsmCacheBase::GatherRows");
}

std::unique_ptr<SsmCacheBase> NewSsmCache(bool batched, int rows, const SsmShape& shape) {
  if (!batched) return std::make_unique<SsmCache>(shape);
  return std::make_unique<BatchedSsmCache>(rows, shape);
}

// ------------------------------------------------------------ invariants
// The wording the checks share (core/invariants_internal.h).
using invariants::Broken;
using invariants::ProductOrMax;
using invariants::RowText;
using invariants::SizeIs;

Status SsmCacheBase::CheckInvariants() const {
  constexpr const char* kType = "SsmCacheBase";
  const SsmShape& s = shape_;
  if (rows_ < 1 || s.value_heads < 1 || s.key_heads < 1 || s.dk < 1 || s.dv < 1 ||
      s.conv < 1 || s.conv > static_cast<int>(kMaxConvKernel)) {
    return Broken(kType, 1, "bad recurrent shape");
  }
  if (s.value_heads % s.key_heads != 0) {
    return Broken(kType, 1, "key heads do not divide value heads");
  }
  const size_t rows = static_cast<size_t>(rows_);
  KVSPEC_RETURN_IF_ERROR(
      SizeIs(kType, 2, "a state buffer", row_floats_, s.ConvFloats() + s.RecurrentFloats()));
  KVSPEC_RETURN_IF_ERROR(
      SizeIs(kType, 2, "states", state_.size(), ProductOrMax({rows, 2, row_floats_})));
  KVSPEC_RETURN_IF_ERROR(SizeIs(kType, 2, "active buffers", active_.size(), rows));
  KVSPEC_RETURN_IF_ERROR(SizeIs(kType, 2, "next positions", next_.size(), rows));
  if (columns_ < 0) return Broken(kType, 3, "negative column count");
  for (int row = 0; row < rows_; ++row) {
    if (active_[row] > 1 || next_[row] < 0 || next_[row] > columns_) {
      return Broken(kType, 3, RowText(row) + ": bad buffer index or position");
    }
  }
  if (verified_ && !armed_) return Broken(kType, 4, "verified without a round");
  const size_t round_rows = armed_ ? rows : 0;
  KVSPEC_RETURN_IF_ERROR(SizeIs(kType, 4, "snapshots", snapshot_.size(), round_rows));
  KVSPEC_RETURN_IF_ERROR(SizeIs(kType, 4, "round sizes", round_real_.size(), round_rows));
  KVSPEC_RETURN_IF_ERROR(SizeIs(kType, 4, "round records", record_.size(), round_rows));
  for (int row = 0; armed_ && row < rows_; ++row) KVSPEC_RETURN_IF_ERROR(CheckRound(row));
  return Status::Ok();
}

Status SsmCacheBase::CheckRound(int row) const {
  constexpr const char* kType = "SsmCacheBase";
  const int32_t real = round_real_[row];
  if (snapshot_[row] > 1 || real < 0 || real > next_[row] || (!verified_ && real != 0)) {
    return Broken(kType, 5, RowText(row) + ": bad round state");
  }
  const uint8_t expect_active =
      verified_ && real > 0 ? static_cast<uint8_t>(1 - snapshot_[row]) : snapshot_[row];
  if (active_[row] != expect_active) {
    return Broken(kType, 5, RowText(row) + ": round buffers disagree");
  }
  const std::string name = RowText(row) + "'s round record";
  return SizeIs(kType, 5, name.c_str(), record_[row].size(),
                ProductOrMax({static_cast<size_t>(real), RecordFloats()}));
}

}  // namespace kvspec
