// The header of a trace: `trace 1`, `rows B` and the `layer` lines.
#include <string>
#include <string_view>
#include <utility>

#include "kvspec/trace/parse_internal.h"

namespace kvspec::trace::parse_internal {
namespace {

// Layer keys: name, allowed kinds (bit per CacheKind), range.
struct LayerKey {
  const char* name;
  unsigned kinds;
  int lo, hi;
};
constexpr unsigned kKvBit = 1u << static_cast<int>(CacheKind::kKv);
constexpr unsigned kRotatingBit = 1u << static_cast<int>(CacheKind::kRotating);
constexpr unsigned kSsmBit = 1u << static_cast<int>(CacheKind::kSsm);
constexpr int kKeyHeads = 0, kKeyDim = 1, kKeyWindow = 2, kKeyCapacity = 3,
              kKeyKheads = 4, kKeyDk = 5, kKeyDv = 6, kKeyConv = 7,
              kKeyQheads = 8, kNumLayerKeys = 9;
constexpr LayerKey kLayerKeys[kNumLayerKeys] = {
    {"heads", kKvBit | kRotatingBit | kSsmBit, 1, kMaxHeads},
    {"dim", kKvBit | kRotatingBit, 1, kMaxDim},
    {"window", kKvBit | kRotatingBit, 1, kMaxWindow},
    {"capacity", kRotatingBit, 1, kMaxWindow},
    {"kheads", kSsmBit, 1, kMaxHeads},
    {"dk", kSsmBit, 1, kMaxDim},
    {"dv", kSsmBit, 1, kMaxDim},
    {"conv", kSsmBit, 1, kMaxConv},
    {"qheads", kKvBit | kRotatingBit, 1, kMaxHeads},
};

}  // namespace

bool Parser::ParseTraceLine() {
  if (!Need(1, "trace: expected the version (`trace 1`)")) return false;
  int64_t version = 0;
  if (!ParseInt(words_[1].text, words_[1].col, &version)) return false;
  if (version != 1) {
    return Fail(words_[1].col, "unsupported trace version " +
                                   std::to_string(version) +
                                   " (this reader knows version 1)");
  }
  if (!End(2, "trace")) return false;
  stage_ = Stage::kRows;
  return true;
}

bool Parser::ParseRowsLine() {
  if (!Need(1, "rows: expected the number of rows")) return false;
  int32_t rows = 0;
  if (!ParseIntInRange(words_[1].text, words_[1].col, 1, kMaxRows, "rows",
                       &rows)) {
    return false;
  }
  if (!End(2, "rows")) return false;
  program_->rows = rows;
  stage_ = Stage::kLayers;
  return true;
}

bool Parser::ParseLayerLine() {
  const Word& keyword = words_[0];
  if (program_->layers.size() >= static_cast<size_t>(kMaxLayers)) {
    return Fail(keyword.col, "too many layers (at most " +
                                 std::to_string(kMaxLayers) + ")");
  }
  LayerConfig layer;
  if (!Need(1, "layer: expected a name")) return false;
  if (!ParseName(words_[1], "layer", &layer.name)) return false;
  for (size_t other = 0; other < program_->layers.size(); ++other) {
    if (program_->layers[other].name == layer.name) {
      return Fail(words_[1].col, "duplicate layer name " +
                                     Quote(layer.name) + " (declared on line " +
                                     std::to_string(program_->layer_lines[other]) + ")");
    }
  }
  if (!Need(2, "layer: expected a kind (kv, rotating or ssm)")) return false;
  const Word& kind_word = words_[2];
  if (!ParseKindName(kind_word.text, &layer.kind)) {
    return Fail(kind_word.col, "unknown layer kind " + Quote(kind_word.text) +
                                   " (expected kv, rotating or ssm)");
  }
  int32_t values[kNumLayerKeys] = {};
  int value_col[kNumLayerKeys] = {};  // 0: key not given
  int kv_col = 0;
  if (!ParseLayerKeys(layer.kind, values, value_col, &layer.kv, &kv_col)) return false;
  if (!ResolveLayer(values, value_col, kind_word, &layer)) return false;
  if (kv_col != 0) {
    const Status type = CheckKvType(layer.kv, layer.dim);
    if (!type.ok()) return Fail(kv_col, "layer: " + type.message());
  }
  program_->layers.push_back(std::move(layer));
  program_->layer_lines.push_back(line_);
  program_->header_end_line = line_;
  return true;
}

bool Parser::ParseLayerKeys(CacheKind kind, int32_t* values, int* value_col, KvType* kv,
                            int* kv_col) {
  const unsigned kind_bit = 1u << static_cast<int>(kind);
  for (size_t i = 3; i < words_.size(); ++i) {
    const Word& w = words_[i];
    const size_t eq = w.text.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return Fail(w.col, "layer: expected key=value, got " + Quote(w.text));
    }
    const std::string_view key = w.text.substr(0, eq);
    if (key == "kv") {  // the storage type: a name, not a number
      if (kind == CacheKind::kSsm) {
        return Fail(w.col, "layer: key 'kv' is not allowed for a ssm layer");
      }
      if (*kv_col != 0) return Fail(w.col, "layer: repeated key 'kv'");
      const int col = w.col + static_cast<int>(eq) + 1;
      if (!ParseKvType(w.text.substr(eq + 1), kv)) {
        return Fail(col, "layer: unknown storage type " + Quote(w.text.substr(eq + 1)) +
                             " (expected f32, bf16, q8_0 or q4_0)");
      }
      *kv_col = col;
      continue;
    }
    int k = 0;
    while (k < kNumLayerKeys && key != kLayerKeys[k].name) ++k;
    if (k == kNumLayerKeys) {
      return Fail(w.col, "layer: unknown key " + Quote(key) +
                             " (keys: heads, qheads, dim, window, capacity, kv, "
                             "kheads, dk, dv, conv)");
    }
    if ((kLayerKeys[k].kinds & kind_bit) == 0) {
      return Fail(w.col, "layer: key " + Quote(key) +
                             " is not allowed for a " +
                             std::string(KindName(kind)) + " layer");
    }
    if (value_col[k] != 0) {
      return Fail(w.col, "layer: repeated key " + Quote(key));
    }
    const int col = w.col + static_cast<int>(eq) + 1;
    if (!ParseIntInRange(w.text.substr(eq + 1), col, kLayerKeys[k].lo,
                         kLayerKeys[k].hi, std::string(key), &values[k])) {
      return false;
    }
    value_col[k] = col;
  }
  return true;
}

bool Parser::ResolveLayer(const int32_t* values, const int* value_col,
                          const Word& kind_word, LayerConfig* layer) {
  if (value_col[kKeyHeads]) layer->heads = values[kKeyHeads];
  if (value_col[kKeyDim]) layer->dim = values[kKeyDim];
  if (value_col[kKeyWindow]) layer->window = values[kKeyWindow];
  if (value_col[kKeyDk]) layer->dk = values[kKeyDk];
  if (value_col[kKeyDv]) layer->dv = values[kKeyDv];
  if (value_col[kKeyConv]) layer->conv = values[kKeyConv];
  if (layer->kind != CacheKind::kSsm) {
    // Grouped-query attention: each KV head serves qheads / heads query
    // heads (contiguous groups).
    layer->q_heads = layer->heads;
    if (value_col[kKeyQheads]) {
      if (values[kKeyQheads] % layer->heads != 0) {
        return Fail(value_col[kKeyQheads],
                    "layer: qheads " + std::to_string(values[kKeyQheads]) +
                        " is not a multiple of heads " +
                        std::to_string(layer->heads));
      }
      layer->q_heads = values[kKeyQheads];
    }
  }
  switch (layer->kind) {
    case CacheKind::kKv:
      break;
    case CacheKind::kRotating:
      if (!value_col[kKeyWindow]) {
        return Fail(kind_word.col, "layer: a rotating layer needs window=W");
      }
      layer->capacity = layer->window;
      if (value_col[kKeyCapacity]) {
        if (values[kKeyCapacity] < layer->window) {
          return Fail(value_col[kKeyCapacity],
                      "layer: capacity " +
                          std::to_string(values[kKeyCapacity]) +
                          " is smaller than window " +
                          std::to_string(layer->window));
        }
        layer->capacity = values[kKeyCapacity];
      }
      break;
    case CacheKind::kSsm:
      layer->kheads = layer->heads;
      if (value_col[kKeyKheads]) {
        if (layer->heads % values[kKeyKheads] != 0) {
          return Fail(value_col[kKeyKheads],
                      "layer: kheads " + std::to_string(values[kKeyKheads]) +
                          " does not divide heads " +
                          std::to_string(layer->heads));
        }
        layer->kheads = values[kKeyKheads];
      }
      break;
  }
  return true;
}

}  // namespace kvspec::trace::parse_internal
