// The layout (core/layout.h): Create, copies, trims and rounds, and its
// invariants. Forwards are in layout_forward.cc, the row operations in
// layout_rows.cc.
#include "kvspec/core/layout.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kvspec/core/invariants.h"
#include "kvspec/core/invariants_internal.h"
#include "kvspec/core/layout_internal.h"
#include "kvspec/kernels/conv1d.h"

namespace kvspec {

namespace layout_internal {

std::string LayerName(const LayerConfig& c, size_t i) {
  return c.name.empty() ? "layer " + std::to_string(i) : "layer '" + c.name + "'";
}

}  // namespace layout_internal

using layout_internal::LayerName;

namespace {

// The cache of one plain attention layer, or why its config is refused.
Status NewPlainLayer(int rows, const LayerConfig& c, size_t i, std::unique_ptr<Cache>* out) {
  if (c.heads < 1 || c.dim < 1 || c.window < 0 || c.QueryHeads() % c.heads != 0) {
    return Status::Error(LayerName(c, i) + ": bad shape (heads " + std::to_string(c.heads) +
                         ", query heads " + std::to_string(c.QueryHeads()) + ", dim " +
                         std::to_string(c.dim) + ", window " + std::to_string(c.window) + ")");
  }
  const Status type = CheckKvType(c.kv, c.dim);
  if (!type.ok()) return Status::Error(LayerName(c, i) + ": " + type.message());
  if (rows == 1) {
    *out = std::make_unique<KvCache>(c.heads, c.dim, c.window, c.kv);
  } else {
    *out = std::make_unique<BatchedKvCache>(rows, c.heads, c.dim, c.window, c.kv);
  }
  return Status::Ok();
}

Status NewRingLayer(int rows, const LayerConfig& c, size_t i, std::unique_ptr<Cache>* out) {
  const int32_t capacity = c.RingCapacity();
  if (c.heads < 1 || c.dim < 1 || c.window < 1 || capacity < c.window ||
      c.QueryHeads() % c.heads != 0) {
    return Status::Error(LayerName(c, i) + ": bad ring shape (heads " +
                         std::to_string(c.heads) + ", dim " + std::to_string(c.dim) +
                         ", window " + std::to_string(c.window) + ", capacity " +
                         std::to_string(capacity) + ")");
  }
  const Status type = CheckKvType(c.kv, c.dim);
  if (!type.ok()) return Status::Error(LayerName(c, i) + ": " + type.message());
  if (rows == 1) {
    *out = std::make_unique<RotatingCache>(c.heads, c.dim, c.window, capacity, c.kv);
  } else {
    *out = std::make_unique<BatchedRotatingCache>(rows, c.heads, c.dim, c.window, capacity,
                                                  c.kv);
  }
  return Status::Ok();
}

Status NewRecurrentLayer(int rows, const LayerConfig& c, size_t i,
                         std::unique_ptr<Cache>* out) {
  SsmShape shape;
  shape.value_heads = c.heads;
  shape.key_heads = c.KeyHeads();
  shape.dk = c.dk;
  shape.dv = c.dv;
  shape.conv = c.conv;
  if (shape.value_heads < 1 || shape.key_heads < 1 ||
      shape.value_heads % shape.key_heads != 0 || shape.dk < 1 || shape.dv < 1 ||
      shape.conv < 1 || shape.conv > static_cast<int>(kMaxConvKernel)) {
    return Status::Error(LayerName(c, i) + ": bad recurrent shape (heads " +
                         std::to_string(shape.value_heads) + ", kheads " +
                         std::to_string(shape.key_heads) + ", dk " + std::to_string(shape.dk) +
                         ", dv " + std::to_string(shape.dv) + ", conv " +
                         std::to_string(shape.conv) + ")");
  }
  if (c.kv != KvType::kF32) {
    return Status::Error(LayerName(c, i) + ": a storage type (kv=" + KvTypeName(c.kv) +
                         ") applies to attention layers only");
  }
  if (rows == 1) {
    *out = std::make_unique<SsmCache>(shape);
  } else {
    *out = std::make_unique<BatchedSsmCache>(rows, shape);
  }
  return Status::Ok();
}

// The cache of layer i of a layout of `rows` rows (batched when rows > 1).
Status NewLayerCache(int rows, const LayerConfig& c, size_t i, std::unique_ptr<Cache>* out) {
  switch (c.kind) {
    case CacheKind::kKv:
      return NewPlainLayer(rows, c, i, out);
    case CacheKind::kRotating:
      return NewRingLayer(rows, c, i, out);
    case CacheKind::kSsm:
      return NewRecurrentLayer(rows, c, i, out);
  }
  return Status::Error(LayerName(c, i) + ": unknown kind");
}

}  // namespace

Status Layout::Create(int rows, std::vector<LayerConfig> layers,
                      std::unique_ptr<Layout>* out) {
  return RefuseOnAllocationFailure("Layout::Create", [&]() -> Status {
    if (rows < 1) return Status::Error("a layout needs at least one row");
    if (layers.empty()) return Status::Error("a layout needs at least one layer");
    std::unique_ptr<Layout> layout(new Layout());
    layout->rows_ = rows;
    for (size_t i = 0; i < layers.size(); ++i) {
      std::unique_ptr<Cache> cache;
      KVSPEC_RETURN_IF_ERROR(NewLayerCache(rows, layers[i], i, &cache));
      layout->layers_.push_back(std::move(cache));
    }
    layout->configs_ = std::move(layers);
    layout->mask_of_layer_.assign(layout->layers_.size(), -1);
    KVSPEC_ASSERT_INVARIANTS(*layout, "Layout::Create");
    *out = std::move(layout);
    return Status::Ok();
  });
}

std::unique_ptr<Layout> Layout::Copy() const {
  std::unique_ptr<Layout> copy;
  const Status s = FatalOnAllocationFailure("Layout::Copy", [&] { return CopyTo(&copy); });
  if (!s.ok()) Fatal("Layout::Copy", s.message());
  return copy;
}

Status Layout::CopyTo(std::unique_ptr<Layout>* out) const {
  return RefuseOnAllocationFailure("Layout::Copy", [&]() -> Status {
    KVSPEC_RETURN_IF_ERROR(CheckBeforeChange("Layout::Copy"));
    *out = CopyUnchecked();
    return Status::Ok();
  });
}

std::unique_ptr<Layout> Layout::CopyUnchecked() const {
  std::unique_ptr<Layout> copy(new Layout());
  copy->rows_ = rows_;
  copy->configs_ = configs_;
  for (const auto& layer : layers_) copy->layers_.push_back(layer->Copy());
  copy->mask_of_layer_.assign(layers_.size(), -1);  // masks point into caches
  copy->bypass_bound_ = bypass_bound_;
  copy->armed_ = armed_;
  copy->verified_ = verified_;
  copy->verify_real_ = verify_real_;
  copy->reference_kernels_ = reference_kernels_;
  KVSPEC_ASSERT_INVARIANTS(*copy, "Layout::Copy");
  return copy;
}

const AttentionCache* Layout::attention(size_t layer) const {
  return layers_[layer]->AsAttention();
}

const SsmCacheBase* Layout::recurrent(size_t layer) const {
  return layers_[layer]->AsRecurrent();
}

size_t Layout::allocatedBytes() const {
  size_t total = 0;
  for (const auto& layer : layers_) total += layer->allocatedBytes();
  return total;
}


Status Layout::Trim(int32_t n, bool bypass) {
  KVSPEC_RETURN_IF_ERROR(RefuseOnAllocationFailure(
      "Layout::Trim", [&] { return CheckBeforeChange("Layout::Trim"); }));
  return FatalOnAllocationFailure("Layout::Trim", [&]() -> Status {
    if (armed_) return Status::Error("trim is refused while a round is armed");
    if (n < 0) return Status::Error("trim of a negative count");
    if (bypass) {
      if (bypass_bound_.empty()) {
        return Status::Error("trim bypass is only valid right after a window");
      }
      for (int r = 0; r < rows_; ++r) {
        if (bypass_bound_[r] < n) {
          return Status::Error("trim " + std::to_string(n) + " bypass: row " +
                               std::to_string(r) + " has only " +
                               std::to_string(bypass_bound_[r]) +
                               " real tokens in the last window");
        }
      }
    }
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (recurrent(i)) {
        return Status::Error(LayerName(configs_[i], i) + " (" + layers_[i]->kind() +
                             ") is recurrent: it is never trimmed; use a speculative round");
      }
      if (!bypass && !layers_[i]->isTrimmable()) {
        return Status::Error(LayerName(configs_[i], i) + " (" + layers_[i]->kind() +
                             ") is not trimmable");
      }
      Status s = layers_[i]->CheckTrim(n, bypass);
      if (!s.ok()) return Status::Error(LayerName(configs_[i], i) + ": " + s.message());
    }
    ForgetLastForward();
    for (size_t i = 0; i < layers_.size(); ++i) {
      Status s = layers_[i]->trim(n, bypass);
      if (!s.ok()) return Status::Error("internal: layers out of lockstep: " + s.message());
    }
    bypass_bound_.clear();
    KVSPEC_ASSERT_INVARIANTS(*this, "Layout::Trim");
    return Status::Ok();
  });
}

Status Layout::Arm() {
  KVSPEC_RETURN_IF_ERROR(RefuseOnAllocationFailure(
      "Layout::Arm", [&] { return CheckBeforeChange("Layout::Arm"); }));
  return FatalOnAllocationFailure("Layout::Arm", [&]() -> Status {
    if (armed_) return Status::Error("a round is already armed");
    for (size_t i = 0; i < layers_.size(); ++i) {
      const SsmCacheBase* ssm = recurrent(i);
      if (ssm && ssm->armed()) {
        return Status::Error("internal: " + LayerName(configs_[i], i) + " is armed already");
      }
    }
    for (size_t i = 0; i < layers_.size(); ++i) {
      SsmCacheBase* ssm = MutableRecurrent(i);
      if (ssm) {
        Status s = ssm->ArmRound();
        if (!s.ok()) return Status::Error("internal: " + s.message());
      }
    }
    armed_ = true;
    verified_ = false;
    verify_real_.clear();
    bypass_bound_.clear();
    KVSPEC_ASSERT_INVARIANTS(*this, "Layout::Arm");
    return Status::Ok();
  });
}

Status Layout::Accept(const std::vector<int32_t>& keep) {
  KVSPEC_RETURN_IF_ERROR(RefuseOnAllocationFailure(
      "Layout::Accept", [&] { return CheckBeforeChange("Layout::Accept"); }));
  return FatalOnAllocationFailure("Layout::Accept", [&]() -> Status {
    if (!armed_) return Status::Error("accept without an armed round");
    if (!verified_) return Status::Error("accept before the round's verify forward");
    if (keep.size() != 1 && keep.size() != static_cast<size_t>(rows_)) {
      return Status::Error("accept takes one count or one per row (" +
                           std::to_string(rows_) + "), got " + std::to_string(keep.size()));
    }
    std::vector<int32_t> drop(static_cast<size_t>(rows_));
    for (int r = 0; r < rows_; ++r) {
      const int32_t k = keep.size() == 1 ? keep[0] : keep[r];
      if (k < 0 || k > verify_real_[r]) {
        return Status::Error("accept " + std::to_string(k) + ": row " + std::to_string(r) +
                             " has " + std::to_string(verify_real_[r]) +
                             " real tokens in the verify forward");
      }
      drop[r] = verify_real_[r] - k;
    }
    std::vector<int32_t> kept(static_cast<size_t>(rows_));
    bool full = true;
    for (int r = 0; r < rows_; ++r) {
      kept[r] = verify_real_[r] - drop[r];
      full = full && drop[r] == 0;
    }
    for (size_t i = 0; i < layers_.size(); ++i) {
      const AttentionCache* a = attention(i);
      Status s = a ? a->CheckDropTips(drop) : recurrent(i)->CheckRollback(kept);
      if (!s.ok()) return Status::Error(LayerName(configs_[i], i) + ": " + s.message());
    }
    ForgetLastForward();
    for (size_t i = 0; i < layers_.size(); ++i) {
      AttentionCache* a = MutableAttention(i);
      SsmCacheBase* ssm = MutableRecurrent(i);
      // Attention layers drop the rejected tips; recurrent layers commit on a
      // full accept, else roll back to the snapshot and replay the kept tokens.
      Status s = a ? a->DropTips(drop) : full ? ssm->Commit() : ssm->Rollback(kept);
      if (!s.ok()) return Status::Error("internal: layers out of lockstep: " + s.message());
    }
    armed_ = false;
    verified_ = false;
    verify_real_.clear();
    bypass_bound_.clear();
    KVSPEC_ASSERT_INVARIANTS(*this, "Layout::Accept");
    return Status::Ok();
  });
}

void Layout::set_reference_kernels(bool on) {
  reference_kernels_ = on;
  for (auto& layer : layers_) {
    auto* ssm = const_cast<SsmCacheBase*>(layer->AsRecurrent());
    if (ssm) ssm->set_reference_kernels(on);
  }
}

const Mask* Layout::LastMask(size_t layer) const {
  const int m = mask_of_layer_[layer];
  return m < 0 ? nullptr : &masks_[m];
}

uint64_t Layout::StateHash() const {
  Hasher h;
  h.Value(rows_);
  for (const auto& layer : layers_) layer->HashState(&h);
  h.Vector(bypass_bound_);
  h.Value(armed_);
  h.Value(verified_);
  h.Vector(verify_real_);
  return h.value();
}

// ------------------------------------------------------------ invariants
// The wording the checks share (core/invariants_internal.h).
using invariants::Broken;

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
           s.dk == config.dk && s.dv == config.dv && s.conv == config.conv &&
           config.kv == KvType::kF32;
  }
  if (!store) return false;
  const int32_t capacity = config.kind == CacheKind::kRotating ? config.RingCapacity() : 0;
  return store->kvHeads() == config.heads && store->headDim() == config.dim &&
         store->kvType() == config.kv && store->window() == config.window && store->ringCapacity() == capacity &&
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
