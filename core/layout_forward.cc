// A layout's forward (core/layout.h): checked and reserved in every layer
// before any layer changes, then written layer by layer.
#include "kvspec/core/layout.h"

#include <algorithm>
#include <new>
#include <string>
#include <vector>

#include "kvspec/core/invariants.h"
#include "kvspec/core/layout_internal.h"
#include "kvspec/core/mask_builder.h"

namespace kvspec {

using layout_internal::LayerName;

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

}  // namespace kvspec
