// A layout's rows (core/layout.h): Filter, Join and Extract, and the bytes
// each would hold.
#include "kvspec/core/layout.h"

#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kvspec/core/batch.h"
#include "kvspec/core/invariants.h"
#include "kvspec/core/layout_internal.h"

namespace kvspec {

using layout_internal::LayerName;

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

}  // namespace kvspec
