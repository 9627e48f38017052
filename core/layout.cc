#include "kvspec/core/layout.h"

#include <algorithm>
#include <exception>
#include <limits>

#include "kvspec/core/batch.h"
#include "kvspec/kernels/conv1d.h"

namespace kvspec {

namespace {

std::string LayerName(const LayerConfig& c, size_t i) {
  return c.name.empty() ? "layer " + std::to_string(i) : "layer '" + c.name + "'";
}

}  // namespace

namespace {

// The cache of one plain attention layer, or why its config is refused.
Status NewPlainLayer(int rows, const LayerConfig& c, size_t i, std::unique_ptr<Cache>* out) {
  if (c.heads < 1 || c.dim < 1 || c.window < 0 || c.QueryHeads() % c.heads != 0) {
    return Status::Error(LayerName(c, i) + ": bad shape (heads " + std::to_string(c.heads) +
                         ", query heads " + std::to_string(c.QueryHeads()) + ", dim " +
                         std::to_string(c.dim) + ", window " + std::to_string(c.window) + ")");
  }
  if (rows == 1) {
    *out = std::make_unique<KvCache>(c.heads, c.dim, c.window);
  } else {
    *out = std::make_unique<BatchedKvCache>(rows, c.heads, c.dim, c.window);
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
  if (rows == 1) {
    *out = std::make_unique<RotatingCache>(c.heads, c.dim, c.window, capacity);
  } else {
    *out = std::make_unique<BatchedRotatingCache>(rows, c.heads, c.dim, c.window, capacity);
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

size_t Layout::BytesAfterForward(int32_t columns) const {
  size_t total = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const AttentionCache* a = attention(i);
    total += a ? a->BytesAfterAppend(columns) : layers_[i]->allocatedBytes();
  }
  return total;
}

void Layout::ForgetLastForward() {
  masks_.clear();
  mask_capacity_.clear();
  std::fill(mask_of_layer_.begin(), mask_of_layer_.end(), -1);
}

Status Layout::CheckForward(const ForwardColumns& cols) const {
  if (armed_ && verified_) {
    return Status::Error("a round is armed and its verify forward has run: accept first");
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    const AttentionCache* a = attention(i);
    const SsmCacheBase* ssm = recurrent(i);
    Status s = a ? a->CheckAppend(cols) : ssm->CheckForward(cols);
    if (!s.ok()) return Status::Error(LayerName(configs_[i], i) + ": " + s.message());
  }
  return Status::Ok();
}

// Everything a forward allocates, reserved before any layer changes: each
// layer's growth, the masks, the positions after the forward.
struct Layout::ForwardSpace {
  std::vector<AppendSpace> append;                    // per layer (attention)
  std::vector<SsmCacheBase::ForwardSpace> recurrent;  // per layer (recurrent)
  std::vector<Mask> masks;                            // one per distinct window
  std::vector<int32_t> mask_capacity;
  std::vector<int> mask_of_layer;
  std::vector<int32_t> next;       // positions after the forward
  std::vector<int32_t> real;       // real tokens per row of the forward
  std::vector<int32_t> bypass;     // the bypass bound after it
};

void Layout::ReserveForward(const ForwardColumns& cols, ForwardSpace* space) const {
  space->append.resize(layers_.size());
  space->recurrent.resize(layers_.size());
  space->mask_of_layer.assign(layers_.size(), -1);
  space->next = positions();
  space->real.assign(static_cast<size_t>(rows_), 0);
  for (int r = 0; r < rows_; ++r) {
    space->next[r] += cols.Real(r);
    space->real[r] = cols.Real(r);
  }
  if (!cols.decode) space->bypass = space->real;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const AttentionCache* a = attention(i);
    if (!a) {
      recurrent(i)->ReserveForward(cols, &space->recurrent[i]);
      continue;
    }
    a->ReserveAppend(cols, &space->append[i]);
    int found = -1;
    for (size_t m = 0; m < space->masks.size(); ++m) {
      if (space->masks[m].window == a->window() && space->mask_capacity[m] == a->ringCapacity()) {
        found = static_cast<int>(m);
      }
    }
    if (found < 0) {
      space->masks.emplace_back();
      space->masks.back().window = a->window();
      ReserveMask(&space->masks.back(), cols, static_cast<size_t>(rows_));
      space->mask_capacity.push_back(a->ringCapacity());
      found = static_cast<int>(space->masks.size() - 1);
    }
    space->mask_of_layer[i] = found;
  }
}

Status Layout::Forward(const ForwardColumns& cols, const std::vector<AttentionIO>& io) {
  // All or nothing: the checks and every allocation first (running out of
  // memory there, even for a refusal's message, is a refusal), then the
  // writes, which allocate nothing but the attention kernels' scratch.
  ForwardSpace space;
  Status checked = RefuseOnAllocationFailure("Layout::Forward", [&]() -> Status {
    KVSPEC_RETURN_IF_ERROR(CheckBeforeChange("Layout::Forward"));
    KVSPEC_RETURN_IF_ERROR(CheckForward(cols));
    if (io.size() != layers_.size()) {
      return Status::Error("forward inputs for " + std::to_string(io.size()) +
                           " layers, layout has " + std::to_string(layers_.size()));
    }
    ReserveForward(cols, &space);
    return Status::Ok();
  });
  if (!checked.ok()) return checked;
  WriteForward(cols, io, &space);
  // Invariant 5 among them: every layer reads a mask built over its own slots.
  KVSPEC_ASSERT_INVARIANTS(*this, "Layout::Forward");
  return Status::Ok();
}

void Layout::WriteForward(const ForwardColumns& cols, const std::vector<AttentionIO>& io,
                          ForwardSpace* space) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    AttentionCache* a = MutableAttention(i);
    SsmCacheBase* ssm = MutableRecurrent(i);
    Status s = a ? a->AppendReserved(cols, io[i].k, io[i].v, &space->append[i])
                 : ssm->ForwardReserved(cols, io[i].ssm, &space->recurrent[i]);
    // CheckForward accepted these columns and their storage is reserved: a
    // refusal here is a broken invariant, not a user error.
    if (!s.ok()) Fatal("Layout::Forward", "layers out of lockstep: " + s.message());
  }
  // One mask per distinct window, built over the first layer of that window
  // (found by a scan: nothing here may allocate).
  for (size_t m = 0; m < space->masks.size(); ++m) {
    size_t i = 0;
    while (space->mask_of_layer[i] != static_cast<int>(m)) ++i;
    const KvView view = attention(i)->View();
    BuildMaskInto(&space->masks[m], cols, space->next, attention(i)->window(), view.slot_pos,
                  view.slot_stride, view.slots, view.first_slot);
  }
  masks_.swap(space->masks);
  mask_capacity_.swap(space->mask_capacity);
  mask_of_layer_.swap(space->mask_of_layer);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const int m = mask_of_layer_[i];
    if (m < 0 || !io[i].out || !io[i].q) continue;
    // The kernels' scratch is their own: an allocation failure there, after
    // the caches were written, is fatal (documented at Layout::Forward).
    try {
      (reference_kernels_ ? AttendReference : Attend)(io[i].q, configs_[i].QueryHeads(),
                                                      attention(i)->View(), masks_[m], io[i].out);
    } catch (const std::bad_alloc&) {
      Fatal("Layout::Forward", "out of memory in the attention kernel's scratch");
    }
  }
  if (armed_) {
    verified_ = true;
    verify_real_.swap(space->real);
  }
  bypass_bound_.swap(space->bypass);
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

namespace {

bool SameLayer(const LayerConfig& a, const LayerConfig& b) {
  return a.name == b.name && a.kind == b.kind && a.heads == b.heads &&
         a.QueryHeads() == b.QueryHeads() && a.dim == b.dim && a.window == b.window &&
         a.capacity == b.capacity && a.kheads == b.kheads && a.dk == b.dk && a.dv == b.dv &&
         a.conv == b.conv;
}

}  // namespace

Status Layout::Filter(const std::vector<int32_t>& rows) {
  KVSPEC_RETURN_IF_ERROR(RefuseOnAllocationFailure(
      "Layout::Filter", [&] { return CheckBeforeChange("Layout::Filter"); }));
  return RefuseOnAllocationFailure("Layout::Filter", [&]() -> Status {
    if (armed_) return Status::Error("filter is refused while a round is armed");
    std::vector<std::unique_ptr<Cache>> layers;
    for (size_t i = 0; i < layers_.size(); ++i) {
      std::unique_ptr<Cache> c;
      Status s = FilterRows(*layers_[i], rows, &c);
      if (!s.ok()) return Status::Error(LayerName(configs_[i], i) + ": " + s.message());
      layers.push_back(std::move(c));
    }
    layers_.swap(layers);
    set_reference_kernels(reference_kernels_);
    rows_ = static_cast<int>(rows.size());
    ForgetLastForward();
    bypass_bound_.clear();
    KVSPEC_ASSERT_INVARIANTS(*this, "Layout::Filter");
    return Status::Ok();
  });
}

Status Layout::Join(const Layout& other) {
  KVSPEC_RETURN_IF_ERROR(RefuseOnAllocationFailure(
      "Layout::Join", [&] { return CheckBeforeChange("Layout::Join"); }));
  KVSPEC_RETURN_IF_ERROR(RefuseOnAllocationFailure(
      "Layout::Join", [&] { return other.CheckBeforeChange("Layout::Join (the other layout)"); }));
  return RefuseOnAllocationFailure("Layout::Join", [&]() -> Status {
    if (armed_ || other.armed_) return Status::Error("join is refused while a round is armed");
    if (&other == this) return Status::Error("a layout cannot join itself");
    if (other.configs_.size() != configs_.size()) {
      return Status::Error("join needs the same layer list");
    }
    for (size_t i = 0; i < configs_.size(); ++i) {
      if (!SameLayer(configs_[i], other.configs_[i])) {
        return Status::Error("join needs the same layer list (" + LayerName(configs_[i], i) +
                             " differs)");
      }
    }
    std::vector<std::unique_ptr<Cache>> layers;
    for (size_t i = 0; i < layers_.size(); ++i) {
      std::unique_ptr<Cache> c;
      Status s = JoinRows(*layers_[i], *other.layers_[i], &c);
      if (!s.ok()) return Status::Error(LayerName(configs_[i], i) + ": " + s.message());
      layers.push_back(std::move(c));
    }
    layers_.swap(layers);
    set_reference_kernels(reference_kernels_);
    rows_ += other.rows_;
    ForgetLastForward();
    bypass_bound_.clear();
    KVSPEC_ASSERT_INVARIANTS(*this, "Layout::Join");
    return Status::Ok();
  });
}

Status Layout::Extract(int32_t row, std::unique_ptr<Layout>* out) const {
  KVSPEC_RETURN_IF_ERROR(RefuseOnAllocationFailure(
      "Layout::Extract", [&] { return CheckBeforeChange("Layout::Extract"); }));
  return RefuseOnAllocationFailure("Layout::Extract", [&]() -> Status {
    if (armed_) return Status::Error("extract is refused while a round is armed");
    std::unique_ptr<Layout> layout(new Layout());
    layout->rows_ = 1;
    layout->configs_ = configs_;
    for (size_t i = 0; i < layers_.size(); ++i) {
      std::unique_ptr<Cache> c;
      Status s = ExtractRow(*layers_[i], row, &c);
      if (!s.ok()) return Status::Error(LayerName(configs_[i], i) + ": " + s.message());
      layout->layers_.push_back(std::move(c));
    }
    layout->mask_of_layer_.assign(layers_.size(), -1);
    layout->set_reference_kernels(reference_kernels_);
    KVSPEC_ASSERT_INVARIANTS(*layout, "Layout::Extract");
    *out = std::move(layout);
    return Status::Ok();
  });
}

namespace {
// a + b, or the largest size_t when it does not fit.
size_t SaturatingAdd(size_t a, size_t b) {
  return a > std::numeric_limits<size_t>::max() - b ? std::numeric_limits<size_t>::max() : a + b;
}
}  // namespace

size_t Layout::BytesAfterFilter(const std::vector<int32_t>& rows) const {
  size_t total = 0;
  for (const auto& layer : layers_) total = SaturatingAdd(total, FilterRowsBytes(*layer, rows));
  return total;
}

size_t Layout::BytesAfterJoin(const Layout& other) const {
  if (other.layers_.size() != layers_.size()) return 0;
  size_t total = 0;
  try {
    for (size_t i = 0; i < layers_.size(); ++i) {
      total = SaturatingAdd(total, MergeRowsBytes({layers_[i].get(), other.layers_[i].get()}));
    }
  } catch (const std::exception&) {
    return std::numeric_limits<size_t>::max();  // not even the list of two
  }
  return total;
}

size_t Layout::BytesOfExtract(int32_t row) const {
  size_t total = 0;
  for (const auto& layer : layers_) total = SaturatingAdd(total, ExtractRowBytes(*layer, row));
  return total;
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

}  // namespace kvspec
