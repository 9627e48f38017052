#include "core/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace kvspec {

Status CheckForwardColumns(const ForwardColumns& cols,
                           const std::vector<int32_t>& next) {
  const size_t rows = next.size();
  if (cols.columns < 1) {
    return Status::Error("a forward needs at least one column, got " +
                         std::to_string(cols.columns));
  }
  if (cols.left.size() != rows || cols.right.size() != rows) {
    return Status::Error("padding lists have " + std::to_string(cols.left.size()) +
                         " and " + std::to_string(cols.right.size()) +
                         " values for " + std::to_string(rows) + " rows");
  }
  for (size_t r = 0; r < rows; ++r) {
    if (cols.left[r] < 0 || cols.right[r] < 0 ||
        static_cast<int64_t>(cols.left[r]) + cols.right[r] > cols.columns) {
      return Status::Error("row " + std::to_string(r) + ": left " +
                           std::to_string(cols.left[r]) + " + right " +
                           std::to_string(cols.right[r]) + " exceeds " +
                           std::to_string(cols.columns) + " columns");
    }
    if (cols.left[r] > 0 && next[r] > 0) {
      return Status::Error("row " + std::to_string(r) + " holds " +
                           std::to_string(next[r]) +
                           " tokens: left padding is only allowed on an empty row");
    }
  }
  return Status::Ok();
}

KvCacheBase::KvCacheBase(int rows, int kv_heads, int dim, int32_t window)
    : rows_(rows), kv_heads_(kv_heads), dim_(dim), window_(window),
      next_(static_cast<size_t>(rows), 0) {}

size_t KvCacheBase::bytesPerToken() const {
  return static_cast<size_t>(kv_heads_) * (2 * static_cast<size_t>(dim_)) * sizeof(float);
}

size_t KvCacheBase::allocatedBytes() const {
  return (k_.size() + v_.size()) * sizeof(float) + slot_pos_.size() * sizeof(int32_t);
}

size_t KvCacheBase::BytesAfterAppend(int32_t columns) const {
  const size_t need = static_cast<size_t>(columns_) + static_cast<size_t>(columns);
  const size_t cap = std::max(need, capacity_);
  return static_cast<size_t>(rows_) * cap * (bytesPerToken() + sizeof(int32_t));
}

void KvCacheBase::Reserve(int64_t columns) {
  const size_t need = static_cast<size_t>(columns);
  if (need <= capacity_) return;
  const size_t cap = std::max<size_t>({need, capacity_ + capacity_ / 2, 16});
  const size_t dim = static_cast<size_t>(dim_);
  std::vector<float> k(static_cast<size_t>(rows_) * kv_heads_ * cap * dim);
  std::vector<float> v(k.size());
  std::vector<int32_t> pos(static_cast<size_t>(rows_) * cap, -1);
  const size_t used = static_cast<size_t>(columns_) * dim;
  for (int r = 0; r < rows_; ++r) {
    for (int h = 0; h < kv_heads_; ++h) {
      const size_t from = (static_cast<size_t>(r) * kv_heads_ + h) * capacity_ * dim;
      const size_t to = (static_cast<size_t>(r) * kv_heads_ + h) * cap * dim;
      if (used) {
        std::memcpy(&k[to], &k_[from], used * sizeof(float));
        std::memcpy(&v[to], &v_[from], used * sizeof(float));
      }
    }
    if (columns_) {
      std::memcpy(&pos[r * cap], &slot_pos_[r * capacity_],
                  static_cast<size_t>(columns_) * sizeof(int32_t));
    }
  }
  k_.swap(k);
  v_.swap(v);
  slot_pos_.swap(pos);
  capacity_ = cap;
}

Status KvCacheBase::CheckAppend(const ForwardColumns& cols) const {
  return CheckForwardColumns(cols, next_);
}

Status KvCacheBase::Append(const ForwardColumns& cols, const float* k,
                           const float* v) {
  KVSPEC_RETURN_IF_ERROR(CheckAppend(cols));
  Reserve(columns_ + cols.columns);
  const size_t dim = static_cast<size_t>(dim_);
  const size_t L = static_cast<size_t>(cols.columns);
  for (int r = 0; r < rows_; ++r) {
    for (size_t i = 0; i < L; ++i) {
      const size_t slot = static_cast<size_t>(columns_) + i;
      for (int h = 0; h < kv_heads_; ++h) {
        // Input [rows][L][kv_heads][dim] -> storage [rows][kv_heads][cap][dim].
        const size_t in = ((r * L + i) * kv_heads_ + h) * dim;
        const size_t out = ((static_cast<size_t>(r) * kv_heads_ + h) * capacity_ + slot) * dim;
        std::memcpy(&k_[out], k + in, dim * sizeof(float));
        std::memcpy(&v_[out], v + in, dim * sizeof(float));
      }
      const bool real = static_cast<int32_t>(i) >= cols.left[r] &&
                        static_cast<int32_t>(i) < cols.columns - cols.right[r];
      slot_pos_[r * capacity_ + slot] =
          real ? next_[r] + (static_cast<int32_t>(i) - cols.left[r]) : -1;
    }
  }
  last_write_real_.assign(static_cast<size_t>(rows_), 0);
  for (int r = 0; r < rows_; ++r) {
    next_[r] += cols.Real(r);
    last_write_real_[r] = cols.Real(r);
  }
  last_write_was_decode_ = cols.decode;
  columns_ += cols.columns;
  return Status::Ok();
}

void KvCacheBase::Drop(const std::vector<int32_t>& drop) {
  const int32_t common = *std::min_element(drop.begin(), drop.end());
  const size_t dim = static_cast<size_t>(dim_);
  std::vector<char> keep(static_cast<size_t>(columns_));
  for (int r = 0; r < rows_; ++r) {
    int32_t* pos = &slot_pos_[r * capacity_];
    // The last `common` real columns go; everything else shifts down.
    int32_t removed = 0;
    for (int64_t c = columns_ - 1; c >= 0; --c) {
      keep[c] = !(pos[c] >= 0 && removed < common);
      if (!keep[c]) ++removed;
    }
    int64_t to = 0;
    for (int64_t c = 0; c < columns_; ++c) {
      if (!keep[c]) continue;
      if (to != c) {
        for (int h = 0; h < kv_heads_; ++h) {
          float* kh = &k_[(static_cast<size_t>(r) * kv_heads_ + h) * capacity_ * dim];
          float* vh = &v_[(static_cast<size_t>(r) * kv_heads_ + h) * capacity_ * dim];
          std::memcpy(kh + to * dim, kh + c * dim, dim * sizeof(float));
          std::memcpy(vh + to * dim, vh + c * dim, dim * sizeof(float));
        }
        pos[to] = pos[c];
      }
      ++to;
    }
    for (int64_t c = to; c < columns_; ++c) pos[c] = -1;
    // Rows that drop more than the common count turn their remaining
    // rejected tips into padding: they hold no visible token any more.
    int32_t extra = drop[r] - common;
    for (int64_t c = to - 1; c >= 0 && extra > 0; --c) {
      if (pos[c] >= 0) {
        pos[c] = -1;
        --extra;
      }
    }
    next_[r] -= drop[r];
  }
  columns_ -= common;
  last_write_real_.clear();
  last_write_was_decode_ = false;
}

Status KvCacheBase::CheckTrim(int32_t n, bool bypass) const {
  if (n < 0) return Status::Error("trim of a negative count");
  if (bypass) {
    if (last_write_real_.empty() || last_write_was_decode_) {
      return Status::Error("trim bypass is only valid right after a window write");
    }
    for (int r = 0; r < rows_; ++r) {
      if (last_write_real_[r] < n) {
        return Status::Error("trim bypass of " + std::to_string(n) + ": row " +
                             std::to_string(r) + " wrote only " +
                             std::to_string(last_write_real_[r]) +
                             " real tokens in the last window");
      }
    }
  } else if (!isTrimmable()) {
    return Status::Error("cache is not trimmable");
  }
  for (int r = 0; r < rows_; ++r) {
    if (next_[r] < n) {
      return Status::Error("trim " + std::to_string(n) + ": row " + std::to_string(r) +
                           " holds only " + std::to_string(next_[r]) + " tokens");
    }
  }
  return Status::Ok();
}

Status KvCacheBase::trim(int32_t n, bool bypass) {
  KVSPEC_RETURN_IF_ERROR(CheckTrim(n, bypass));
  Drop(std::vector<int32_t>(static_cast<size_t>(rows_), n));
  return Status::Ok();
}

Status KvCacheBase::CheckDropTips(const std::vector<int32_t>& drop) const {
  if (drop.size() != static_cast<size_t>(rows_)) {
    return Status::Error("drop list has " + std::to_string(drop.size()) +
                         " values for " + std::to_string(rows_) + " rows");
  }
  if (last_write_real_.empty()) {
    return Status::Error("rejected tips can only be dropped right after a write");
  }
  for (int r = 0; r < rows_; ++r) {
    if (drop[r] < 0 || drop[r] > last_write_real_[r]) {
      return Status::Error("row " + std::to_string(r) + ": cannot drop " +
                           std::to_string(drop[r]) + " of the " +
                           std::to_string(last_write_real_[r]) +
                           " tokens of the last write");
    }
  }
  return Status::Ok();
}

Status KvCacheBase::DropTips(const std::vector<int32_t>& drop) {
  KVSPEC_RETURN_IF_ERROR(CheckDropTips(drop));
  Drop(drop);
  return Status::Ok();
}

void KvCacheBase::HashState(Hasher* hasher) const {
  hasher->Value(rows_);
  hasher->Value(kv_heads_);
  hasher->Value(dim_);
  hasher->Value(window_);
  hasher->Value(columns_);
  hasher->Value(static_cast<uint64_t>(capacity_));
  hasher->Vector(k_);
  hasher->Vector(v_);
  hasher->Vector(slot_pos_);
  hasher->Vector(next_);
  hasher->Vector(last_write_real_);
  hasher->Value(last_write_was_decode_);
}

KvView KvCacheBase::View() const {
  KvView view;
  view.k = k_.data();
  view.v = v_.data();
  view.head_stride = capacity_ * static_cast<size_t>(dim_);
  view.row_stride = view.head_stride * kv_heads_;
  view.rows = rows_;
  view.kv_heads = kv_heads_;
  view.dim = dim_;
  view.slot_pos = slot_pos_.data();
  view.slot_stride = capacity_;
  view.slots = static_cast<int32_t>(columns_);
  return view;
}

std::vector<int32_t> KvCacheBase::LogicalSlots(int row) const {
  std::vector<int32_t> slots;
  for (int64_t c = 0; c < columns_; ++c) {
    if (slot_pos_[row * capacity_ + c] >= 0) slots.push_back(static_cast<int32_t>(c));
  }
  return slots;
}

}  // namespace kvspec
