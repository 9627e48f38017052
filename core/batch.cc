#include "core/batch.h"

#include <algorithm>
#include <string>

#include "core/invariants.h"
#include "core/kv_cache.h"
#include "core/ssm_cache.h"

namespace kvspec {
namespace {

// Classifies a cache by its kind string; anything unknown is refused.
Status KindOf(const Cache& cache, CacheKind* cache_kind) {
  const std::string kind = cache.kind();
  bool batched = false;
  if (!ParseKindString(kind, cache_kind, &batched)) {
    return Status::Error("unknown cache kind '" + kind + "': refused");
  }
  // The kind must match the object: a kind string is not a type.
  const bool is_store = dynamic_cast<const ColumnStore*>(&cache) != nullptr;
  const bool is_ssm = dynamic_cast<const SsmCacheBase*>(&cache) != nullptr;
  if ((*cache_kind == CacheKind::kSsm && !is_ssm) || (*cache_kind != CacheKind::kSsm && !is_store)) {
    return Status::Error("cache of kind '" + kind + "' is not what its kind says: refused");
  }
  return Status::Ok();
}

Status NotArmed(const Cache& cache) {
  const auto* ssm = dynamic_cast<const SsmCacheBase*>(&cache);
  if (ssm && ssm->armed()) {
    return Status::Error("a speculative round is armed: commit or roll back first");
  }
  return Status::Ok();
}

// Rows (cache, row) gathered into one cache of the given cache_kind.
struct Source {
  const Cache* cache;
  int row;
};

Status Gather(CacheKind cache_kind, bool batched, const std::vector<Source>& rows, int64_t columns,
              std::unique_ptr<Cache>* out) {
  const int n = static_cast<int>(rows.size());
  if (cache_kind == CacheKind::kSsm) {
    const auto& first = static_cast<const SsmCacheBase&>(*rows[0].cache);
    std::unique_ptr<SsmCacheBase> c = NewSsmCache(batched, n, first.shape());
    std::vector<SsmCacheBase::RowSource> src;
    for (const Source& s : rows) {
      src.push_back({static_cast<const SsmCacheBase*>(s.cache), s.row});
    }
    c->GatherRows(src, columns);
    *out = std::move(c);
    return Status::Ok();
  }
  const auto& first = static_cast<const ColumnStore&>(*rows[0].cache);
  std::unique_ptr<ColumnStore> c =
      NewColumnStore(batched, n, first.kvHeads(), first.headDim(), first.window(),
                     first.ringCapacity());
  std::vector<ColumnStore::RowSource> src;
  int64_t peak = 0;
  for (const Source& s : rows) {
    const auto* store = static_cast<const ColumnStore*>(s.cache);
    src.push_back({store, s.row});
    peak = std::max(peak, store->peak());
  }
  c->GatherRows(src, columns, peak);
  *out = std::move(c);
  return Status::Ok();
}

}  // namespace

Status FilterRows(const Cache& cache, const std::vector<int32_t>& rows,
                  std::unique_ptr<Cache>* out) {
  return RefuseOnAllocationFailure("FilterRows", [&]() -> Status {
    CacheKind cache_kind;
    KVSPEC_RETURN_IF_ERROR(KindOf(cache, &cache_kind));
    KVSPEC_RETURN_IF_ERROR(NotArmed(cache));
    if (rows.empty()) return Status::Error("filter needs at least one row");
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i] < 0 || rows[i] >= cache.rows()) {
        return Status::Error("filter: no row " + std::to_string(rows[i]) + " (the batch has " +
                             std::to_string(cache.rows()) + ")");
      }
      if (i > 0 && rows[i] <= rows[i - 1]) {
        return Status::Error("filter: rows must be strictly ascending");
      }
    }
    std::vector<Source> src;
    for (int32_t r : rows) src.push_back({&cache, r});
    return Gather(cache_kind, IsBatchedCache(cache.kind()), src, cache.columns(), out);
  });
}

Status JoinRows(const Cache& a, const Cache& b, std::unique_ptr<Cache>* out) {
  return RefuseOnAllocationFailure("JoinRows", [&]() -> Status {
    return MergeRows({&a, &b}, out);
  });
}

Status ExtractRow(const Cache& cache, int32_t row, std::unique_ptr<Cache>* out) {
  return RefuseOnAllocationFailure("ExtractRow", [&]() -> Status {
    CacheKind cache_kind;
    KVSPEC_RETURN_IF_ERROR(KindOf(cache, &cache_kind));
    KVSPEC_RETURN_IF_ERROR(NotArmed(cache));
    if (row < 0 || row >= cache.rows()) {
      return Status::Error("extract: no row " + std::to_string(row) + " (the batch has " +
                           std::to_string(cache.rows()) + ")");
    }
    if (cache_kind == CacheKind::kSsm) {
      const int64_t count = cache.positions()[row];
      return Gather(cache_kind, false, {{&cache, row}}, count, out);
    }
    const auto& store = static_cast<const ColumnStore&>(cache);
    std::unique_ptr<ColumnStore> c = NewColumnStore(false, 1, store.kvHeads(), store.headDim(),
                                                    store.window(), store.ringCapacity());
    c->GatherRealTokens(store, row);
    *out = std::move(c);
    return Status::Ok();
  });
}

Status MergeRows(const std::vector<const Cache*>& caches, std::unique_ptr<Cache>* out) {
  return RefuseOnAllocationFailure("MergeRows", [&]() -> Status {
    if (caches.empty()) return Status::Error("merge needs at least one cache");
    CacheKind cache_kind;
    KVSPEC_RETURN_IF_ERROR(KindOf(*caches[0], &cache_kind));
    std::vector<Source> src;
    int64_t columns = 0;
    for (const Cache* c : caches) {
      CacheKind other;
      KVSPEC_RETURN_IF_ERROR(KindOf(*c, &other));
      KVSPEC_RETURN_IF_ERROR(NotArmed(*c));
      if (other != cache_kind) {
        return Status::Error("cannot join a " + c->kind() + " cache with a " +
                             caches[0]->kind() + " cache");
      }
      const bool same =
          cache_kind == CacheKind::kSsm
              ? static_cast<const SsmCacheBase*>(c)->SameShape(
                    *static_cast<const SsmCacheBase*>(caches[0]))
              : static_cast<const ColumnStore*>(c)->SameShape(
                    *static_cast<const ColumnStore*>(caches[0]));
      if (!same) return Status::Error("cannot join caches of different shapes");
      for (int r = 0; r < c->rows(); ++r) src.push_back({c, r});
      columns = std::max(columns, c->columns());
    }
    return Gather(cache_kind, true, src, columns, out);
  });
}

}  // namespace kvspec
