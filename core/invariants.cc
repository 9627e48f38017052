// The CheckInvariants() of the column store, the recurrent caches and the
// layout: one statement of each invariant listed at those classes. The codec
// refuses a decoded state these reject; debug builds abort on one after an
// operation (core/invariants.h).
#include "kvspec/core/invariants.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>

#include "kvspec/core/kv_cache.h"
#include "kvspec/core/layout.h"
#include "kvspec/core/ssm_cache.h"
#include "kvspec/kernels/conv1d.h"

namespace kvspec {

void InvariantBroken(const char* operation, const std::string& message, const char* file,
                     int line) {
  std::fprintf(stderr, "kvspec: invariant broken after %s (%s:%d): %s\n", operation, file, line,
               message.c_str());
  std::fflush(stderr);
  std::abort();
}

void Fatal(const char* operation, const std::string& message) {
  std::fprintf(stderr, "kvspec: fatal in %s: %s\n", operation, message.c_str());
  std::fflush(stderr);
  std::abort();
}

namespace {

Status Broken(const char* type, int invariant, const std::string& what) {
  return Status::Error(what + " (" + type + " invariant " + std::to_string(invariant) + ")");
}

// a * b * ..., or the largest size_t when that overflows (no buffer is that
// large, so a size compared with it never matches).
size_t ProductOrMax(std::initializer_list<size_t> factors) {
  size_t p = 1;
  for (size_t f : factors) {
    if (__builtin_mul_overflow(p, f, &p)) return std::numeric_limits<size_t>::max();
  }
  return p;
}

// "NAME holds N values, M expected" unless `actual` is `expected`.
Status SizeIs(const char* type, int invariant, const char* name, size_t actual,
              size_t expected) {
  if (actual == expected) return Status::Ok();
  return Broken(type, invariant,
                std::string(name) + " holds " + std::to_string(actual) + " values, " +
                    std::to_string(expected) + " expected");
}

std::string RowText(int row) { return "row " + std::to_string(row); }

}  // namespace

// ------------------------------------------------------------ column store
Status ColumnStore::CheckStoredState() const {
  constexpr const char* kType = "ColumnStore";
  const bool ring = ring_capacity_ > 0;
  if (rows_ < 1 || kv_heads_ < 1 || dim_ < 1 || window_ < 0 || ring_capacity_ < 0 ||
      (ring && (window_ < 1 || window_ > ring_capacity_))) {
    return Broken(kType, 1,
                  "bad shape (rows " + std::to_string(rows_) + ", kv heads " +
                      std::to_string(kv_heads_) + ", dim " + std::to_string(dim_) +
                      ", window " + std::to_string(window_) + ", ring capacity " +
                      std::to_string(ring_capacity_) + ")");
  }
  if (held_ < 0 || held_ > columns_ || columns_ > peak_ || peak_before_write_ < 0 ||
      peak_before_write_ > peak_) {
    return Broken(kType, 2,
                  "counters out of order (held " + std::to_string(held_) + ", columns " +
                      std::to_string(columns_) + ", peak " + std::to_string(peak_) +
                      ", peak before the last write " + std::to_string(peak_before_write_) +
                      ")");
  }
  if (static_cast<uint64_t>(held_) > slots_ || (slots_ == 0 ? first_ != 0 : first_ >= slots_)) {
    return Broken(kType, 3,
                  "inconsistent ring geometry (slots " + std::to_string(slots_) + ", first " +
                      std::to_string(first_) + ", held " + std::to_string(held_) + ")");
  }
  if (!ring && (held_ != columns_ || first_ != 0)) {
    return Broken(kType, 4, "a plain cache holds every column from slot 0");
  }
  if (!wrapped() && held_ != columns_) {
    return Broken(kType, 4, "a cache that has not wrapped holds every column");
  }
  const size_t rows = static_cast<size_t>(rows_);
  const size_t elements =
      ProductOrMax({rows, static_cast<size_t>(kv_heads_), slots_, static_cast<size_t>(dim_)});
  KVSPEC_RETURN_IF_ERROR(SizeIs(kType, 5, "keys", k_.size(), elements));
  KVSPEC_RETURN_IF_ERROR(SizeIs(kType, 5, "values", v_.size(), elements));
  KVSPEC_RETURN_IF_ERROR(
      SizeIs(kType, 5, "slot positions", slot_pos_.size(), ProductOrMax({rows, slots_})));
  KVSPEC_RETURN_IF_ERROR(SizeIs(kType, 5, "next positions", next_.size(), rows));
  if (!last_write_real_.empty() && last_write_real_.size() != rows) {
    return Broken(kType, 5,
                  "last write lists " + std::to_string(last_write_real_.size()) + " rows");
  }
  if (last_write_real_.empty() && last_write_was_decode_) {
    return Broken(kType, 9, "the last write is a decode, but there is no last write");
  }
  for (int row = 0; row < rows_; ++row) KVSPEC_RETURN_IF_ERROR(CheckRow(row));
  return Status::Ok();
}

Status ColumnStore::CheckRow(int row) const {
  constexpr const char* kType = "ColumnStore";
  const int32_t next = next_[row];
  if (next < 0 || next > columns_) {
    return Broken(kType, 6,
                  RowText(row) + ": next position " + std::to_string(next) + " outside [0, " +
                      std::to_string(columns_) + "]");
  }
  const int32_t* pos = slot_pos_.data() + static_cast<size_t>(row) * slots_;
  int32_t prev = -1, real = 0;
  for (int64_t col = 0; col < held_; ++col) {
    const int32_t p = pos[Slot(col)];
    if (p < -1 || p >= next || (p >= 0 && p <= prev)) {
      return Broken(kType, 7,
                    RowText(row) + ": slot position " + std::to_string(p) +
                        " out of order or range");
    }
    if (p >= 0) {
      prev = p;
      ++real;
    }
  }
  // The slots after the newest held column, up to the oldest, hold nothing.
  for (int64_t col = held_; col < static_cast<int64_t>(slots_); ++col) {
    if (pos[Slot(col)] != -1) {
      return Broken(kType, 7, RowText(row) + ": a slot outside the held columns holds a position");
    }
  }
  const int32_t needed =
      wrapped() && next > ring_capacity_ ? std::min(next, window_ - 1) : next;
  if (real < needed || (real > 0 && prev != next - 1)) {
    return Broken(kType, 8,
                  RowText(row) + " holds " + std::to_string(real) +
                      " of the tokens it needs");
  }
  if (!last_write_real_.empty() && (last_write_real_[row] < 0 || last_write_real_[row] > real)) {
    return Broken(kType, 9, RowText(row) + ": last write larger than what is held");
  }
  return Status::Ok();
}

Status ColumnStore::CheckInvariants() const {
  constexpr const char* kType = "ColumnStore";
  KVSPEC_RETURN_IF_ERROR(CheckStoredState());
  KVSPEC_RETURN_IF_ERROR(
      SizeIs(kType, 10, "held pads", held_pads_.size(), static_cast<size_t>(rows_)));
  for (int row = 0; row < rows_; ++row) {
    int64_t pads = 0;
    for (int64_t col = 0; col < held_; ++col) {
      pads += slot_pos_[static_cast<size_t>(row) * slots_ + Slot(col)] < 0;
    }
    if (pads != held_pads_[row]) {
      return Broken(kType, 10,
                    RowText(row) + " counts " + std::to_string(held_pads_[row]) +
                        " held pads, holds " + std::to_string(pads));
    }
  }
  return Status::Ok();
}

// ------------------------------------------------------------ recurrent
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

// ------------------------------------------------------------ layout
namespace {

constexpr const char* kLayoutType = "Layout";

std::string LayerText(size_t layer) { return "layer " + std::to_string(layer); }

// Whether `cache` is the cache `config` describes.
bool MatchesConfig(const Cache& cache, const LayerConfig& config) {
  const auto* store = cache.AsColumnStore();
  const auto* ssm = cache.AsRecurrent();
  if (config.kind == CacheKind::kSsm) {
    if (!ssm) return false;
    const SsmShape& s = ssm->shape();
    return s.value_heads == config.heads && s.key_heads == config.KeyHeads() &&
           s.dk == config.dk && s.dv == config.dv && s.conv == config.conv;
  }
  if (!store) return false;
  const int32_t capacity = config.kind == CacheKind::kRotating ? config.RingCapacity() : 0;
  return store->kvHeads() == config.heads && store->headDim() == config.dim &&
         store->window() == config.window && store->ringCapacity() == capacity &&
         config.QueryHeads() % config.heads == 0;
}

}  // namespace

Status Layout::CheckLayer(size_t i) const {
  const Cache& c = *layers_[i];
  const Status own = c.CheckInvariants();
  if (!own.ok()) return Broken(kLayoutType, 2, LayerText(i) + ": " + own.message());
  // The kind string only when it is needed (it may allocate).
  if (c.rows() != rows_ || (rows_ > 1 && !IsBatchedCache(c.kind()))) {
    return Broken(kLayoutType, 2,
                  LayerText(i) + ": cache of kind " + c.kind() + " with " +
                      std::to_string(c.rows()) + " rows in a layout of " +
                      std::to_string(rows_));
  }
  if (!MatchesConfig(c, configs_[i])) {
    return Broken(kLayoutType, 2,
                  LayerText(i) + ": cache of kind " + c.kind() +
                      " does not match the layer's configuration");
  }
  if (c.positionsRef() != layers_[0]->positionsRef() || c.columns() != layers_[0]->columns()) {
    return Broken(kLayoutType, 3, LayerText(i) + " is out of step with layer 0");
  }
  // Compared with the first layer of its mask only: equal phases are
  // transitive, and the check stays linear in the layers.
  const auto* store = c.AsColumnStore();
  for (size_t j = 0; store && j < i; ++j) {
    const auto* other = layers_[j]->AsColumnStore();
    if (!other || other->window() != store->window() ||
        other->ringCapacity() != store->ringCapacity()) {
      continue;
    }
    if (!other->SamePhase(*store)) {
      return Broken(kLayoutType, 4,
                    LayerText(i) + " is out of lockstep with layer " + std::to_string(j));
    }
    break;
  }
  return Status::Ok();
}

Status Layout::CheckMaskOfLayer(size_t i) const {
  const int m = mask_of_layer_[i];
  if (m == -1) return Status::Ok();
  // Any other negative index converts to more than the masks there are.
  if (static_cast<size_t>(m) >= masks_.size()) {
    return Broken(kLayoutType, 5,
                  LayerText(i) + " reads mask " + std::to_string(m) + " of " +
                      std::to_string(masks_.size()));
  }
  const AttentionCache* a = attention(i);
  const Mask& mask = masks_[m];
  if (!a || a->window() != mask.window || a->ringCapacity() != mask_capacity_[m]) {
    return Broken(kLayoutType, 5, LayerText(i) + " reads the mask of another window");
  }
  // Every layer of a window reads the mask built over the first one's slots:
  // they must hold the same slot positions in the same phase.
  const KvView view = a->View();
  bool same = mask.rows == rows_ && view.slots == mask.slots &&
              view.first_slot == mask.first_slot;
  for (int r = 0; same && view.slots > 0 && r < rows_; ++r) {
    same = std::memcmp(view.slot_pos + r * view.slot_stride, mask.slot_pos + r * mask.slot_stride,
                       sizeof(int32_t) * static_cast<size_t>(view.slots)) == 0;
  }
  if (!same) return Broken(kLayoutType, 5, LayerText(i) + " is out of lockstep with its mask");
  return Status::Ok();
}

Status Layout::CheckRoundState() const {
  const size_t rows = static_cast<size_t>(rows_);
  if ((!bypass_bound_.empty() && bypass_bound_.size() != rows) || (verified_ && !armed_) ||
      verify_real_.size() != (verified_ ? rows : 0)) {
    return Broken(kLayoutType, 6, "bad layout round state");
  }
  const std::vector<int32_t>& next = layers_[0]->positionsRef();
  for (int row = 0; row < rows_; ++row) {
    if ((!bypass_bound_.empty() && (bypass_bound_[row] < 0 || bypass_bound_[row] > next[row])) ||
        (verified_ && (verify_real_[row] < 0 || verify_real_[row] > next[row]))) {
      return Broken(kLayoutType, 6, "bad layout round state for row " + std::to_string(row));
    }
  }
  // The bound of a bypass trim or an accept must be held by every layer.
  const std::vector<int32_t>& bound = verified_ ? verify_real_ : bypass_bound_;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const SsmCacheBase* ssm = recurrent(i);
    const auto* store = layers_[i]->AsColumnStore();
    if (ssm && (ssm->armed() != armed_ || ssm->verified() != verified_ ||
                (verified_ && ssm->roundReal() != verify_real_))) {
      return Broken(kLayoutType, 6, LayerText(i) + ": round state disagrees");
    }
    if (!store || bound.empty()) continue;
    if (store->lastWriteReal().empty()) {
      return Broken(kLayoutType, 7, LayerText(i) + ": no last write for the bound");
    }
    for (int row = 0; row < rows_; ++row) {
      if (bound[row] > store->lastWriteReal()[row]) {
        return Broken(kLayoutType, 7, LayerText(i) + ": bound exceeds the last write");
      }
    }
  }
  return Status::Ok();
}

Status Layout::CheckBeforeChange(const char* operation) const {
  // Invariants 1, 3, the sizes of 5, and 6-7: O(rows x layers), unlike the
  // caches' own invariants (linear in their storage).
  Status s;
  if (rows_ < 1 || layers_.empty() || configs_.size() != layers_.size()) {
    s = Broken(kLayoutType, 1, "a layout without rows, layers or one config per layer");
  } else if (masks_.size() != mask_capacity_.size() || mask_of_layer_.size() != layers_.size()) {
    s = Broken(kLayoutType, 5, "mask bookkeeping of the wrong size");
  }
  for (size_t i = 0; s.ok() && i < layers_.size(); ++i) {
    const Cache& c = *layers_[i];
    if (c.rows() != rows_ || c.columns() != layers_[0]->columns() ||
        c.positionsRef() != layers_[0]->positionsRef()) {
      s = Broken(kLayoutType, 3, LayerText(i) + " is out of step with layer 0");
    }
  }
  if (s.ok()) s = CheckRoundState();
  if (s.ok()) return s;
  return Status::Error(std::string(operation) + " refused: " + s.message());
}

Status Layout::CheckInvariants() const {
  if (rows_ < 1 || layers_.empty() || configs_.size() != layers_.size()) {
    return Broken(kLayoutType, 1,
                  "a layout of " + std::to_string(rows_) + " rows, " +
                      std::to_string(layers_.size()) + " layers and " +
                      std::to_string(configs_.size()) + " configs");
  }
  for (size_t i = 0; i < layers_.size(); ++i) KVSPEC_RETURN_IF_ERROR(CheckLayer(i));
  if (masks_.size() != mask_capacity_.size() || mask_of_layer_.size() != layers_.size()) {
    return Broken(kLayoutType, 5, "mask bookkeeping of the wrong size");
  }
  for (size_t i = 0; i < layers_.size(); ++i) KVSPEC_RETURN_IF_ERROR(CheckMaskOfLayer(i));
  return CheckRoundState();
}

}  // namespace kvspec
