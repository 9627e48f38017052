// Statements after the header: operations and expectations.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvspec/trace/parse_internal.h"

namespace kvspec::trace::parse_internal {

bool Parser::ParseOperation(size_t k, Statement* s) {
  const Word& keyword = words_[k];
  const std::string op(keyword.text);
  const size_t i = k + 1;
  if (op == "window" || op == "decode") return ParseForward(k, s);
  if (op == "trim") return ParseTrim(k, s);
  if (op == "arm" || op == "reload") {
    if (op == "arm") {
      s->operation.emplace<ArmOp>();
    } else {
      s->operation.emplace<ReloadOp>();
    }
    return End(i, op);
  }
  if (op == "accept") {
    AcceptOp& accept = s->operation.emplace<AcceptOp>();
    if (!Need(i, "accept: expected K or K0,K1,..")) return false;
    if (!ParseIntList(words_[i].text, words_[i].col, &accept.keep)) return false;
    return End(i + 1, op);
  }
  if (op == "fork" || op == "use" || op == "join") return ParseLayoutName(k, s);
  if (op == "filter") {
    FilterOp& filter = s->operation.emplace<FilterOp>();
    if (!Need(i, "filter: expected rows R0,R1,..")) return false;
    if (!ParseIntList(words_[i].text, words_[i].col, &filter.rows)) return false;
    return End(i + 1, op);
  }
  // Both callers pass only words IsOperationKeyword accepts (parse.cc and
  // `expect error OP`); the one left is `extract`.
  return ParseExtract(k, s);
}

bool Parser::ParseForward(size_t k, Statement* s) {
  const size_t i = k + 1;
  if (words_[k].text == "window") {
    WindowOp& window = s->operation.emplace<WindowOp>();
    if (!Need(i, "window: expected the number of columns L")) return false;
    int32_t columns = 0;
    if (!ParseIntInRange(words_[i].text, words_[i].col, 1,
                         kMaxColumnsPerForward, "window: L", &columns)) {
      return false;
    }
    window.columns = columns;
    return ParseWindowOptions(i + 1, true, &window);
  }
  // A decode is parsed as a window that accepts only ids=.
  WindowOp options;
  if (!ParseWindowOptions(i, false, &options)) return false;
  DecodeOp& decode = s->operation.emplace<DecodeOp>();
  decode.has_ids = options.has_ids;
  decode.ids = std::move(options.ids);
  return true;
}

bool Parser::ParseTrim(size_t k, Statement* s) {
  size_t i = k + 1;
  TrimOp& trim = s->operation.emplace<TrimOp>();
  if (!Need(i, "trim: expected the number of tokens N")) return false;
  int32_t count = 0;
  if (!ParseIntInRange(words_[i].text, words_[i].col, 0, kMaxInteger,
                       "trim: N", &count)) {
    return false;
  }
  trim.count = count;
  ++i;
  if (i < words_.size() && words_[i].text == "bypass") {
    trim.bypass = true;
    ++i;
  }
  return End(i, "trim");
}

bool Parser::ParseLayoutName(size_t k, Statement* s) {
  const Word& keyword = words_[k];
  const std::string op(keyword.text);
  const size_t i = k + 1;
  if (op == "fork" && !CountForkExtract(keyword)) return false;
  if (!Need(i, op + ": expected a layout name")) return false;
  std::string name;
  if (!ParseName(words_[i], op, &name)) return false;
  if (op == "fork") {
    s->operation = ForkOp{std::move(name)};
  } else if (op == "use") {
    s->operation = UseOp{std::move(name)};
  } else {
    s->operation = JoinOp{std::move(name)};
  }
  return End(i + 1, op);
}

bool Parser::ParseExtract(size_t k, Statement* s) {
  size_t i = k + 1;
  ExtractOp& extract = s->operation.emplace<ExtractOp>();
  if (!CountForkExtract(words_[k])) return false;
  if (!Need(i, "extract: expected `R as NAME`")) return false;
  int32_t row = 0;
  if (!ParseIntInRange(words_[i].text, words_[i].col, 0, kMaxInteger,
                       "extract: R", &row)) {
    return false;
  }
  extract.row = row;
  ++i;
  if (!Need(i, "extract: expected `as NAME` after the row")) return false;
  if (words_[i].text != "as") {
    return Fail(words_[i].col,
                "extract: expected `as`, got " + Quote(words_[i].text));
  }
  ++i;
  if (!Need(i, "extract: expected a layout name after `as`")) return false;
  if (!ParseName(words_[i], "extract", &extract.name)) return false;
  return End(i + 1, "extract");
}

bool Parser::ParseWindowOptions(size_t i, bool is_window, WindowOp* s) {
  const char* statement = is_window ? "window" : "decode";
  for (; i < words_.size(); ++i) {
    const Word& w = words_[i];
    const size_t eq = w.text.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return Fail(w.col, std::string(statement) +
                             ": expected key=value option, got " +
                             Quote(w.text));
    }
    const std::string_view key = w.text.substr(0, eq);
    const std::string_view value = w.text.substr(eq + 1);
    const int col = w.col + static_cast<int>(eq) + 1;
    bool* has = nullptr;
    if (key == "ids") {
      has = &s->has_ids;
    } else if (is_window && key == "left") {
      has = &s->has_left;
    } else if (is_window && key == "right") {
      has = &s->has_right;
    } else {
      return Fail(w.col, std::string(statement) + ": unknown option " +
                             Quote(key) +
                             (is_window ? " (expected left=, right= or ids=)"
                                        : " (expected ids=)"));
    }
    if (*has) {
      return Fail(w.col,
                  std::string(statement) + ": repeated option " + Quote(key));
    }
    *has = true;
    bool ok = true;
    if (key == "ids") {
      ok = ParseIdGroups(value, col, &s->ids);
    } else if (key == "left") {
      ok = ParseIntList(value, col, &s->left);
    } else {
      ok = ParseIntList(value, col, &s->right);
    }
    if (!ok) return false;
  }
  return true;
}

bool Parser::ParseExpectation(size_t k, Statement* s) {
  size_t i = k + 1;
  if (!Need(i, "expect: expected sees, out, positions, error, equal, "
               "trimmable, kind or bytes_per_token")) {
    return false;
  }
  const Word& what_word = words_[i];
  const std::string what(what_word.text);
  const std::string statement = "expect " + what;
  ++i;
  if (what == "sees") return ParseSeen(i, &s->operation.emplace<ExpectSees>());
  if (what == "out") return ParseOut(i, &s->operation.emplace<ExpectOut>());
  if (what == "positions") {
    ExpectPositions& positions = s->operation.emplace<ExpectPositions>();
    if (!Need(i, "expect positions: expected N0,N1,..")) return false;
    if (!ParseIntList(words_[i].text, words_[i].col, &positions.positions)) {
      return false;
    }
    return End(i + 1, statement);
  }
  if (what == "error") return ParseExpectError(i, s);
  if (what == "equal") {
    ExpectEqual& equal = s->operation.emplace<ExpectEqual>();
    if (!Need(i, "expect equal: expected a layout name")) return false;
    if (!ParseName(words_[i], "expect equal", &equal.name)) {
      return false;
    }
    return End(i + 1, statement);
  }
  if (what == "trimmable" || what == "kind" || what == "bytes_per_token") {
    return ParseLayerExpectation(i, what, s);
  }
  return Fail(what_word.col,
              "unknown expectation " + Quote(what_word.text) +
                  " (expected sees, out, positions, error, equal, trimmable, "
                  "kind or bytes_per_token)");
}

bool Parser::ParseExpectError(size_t i, Statement* s) {
  ExpectError& error = s->operation.emplace<ExpectError>();
  if (!Need(i, "expect error: expected an operation")) return false;
  const Word& inner_word = words_[i];
  if (inner_word.text == "expect") {
    return Fail(inner_word.col,
                "expect error: expected an operation, not an expectation");
  }
  if (!IsOperationKeyword(inner_word.text)) {
    return Fail(inner_word.col, "expect error: " + Quote(inner_word.text) +
                                    " is not an operation");
  }
  auto inner = std::make_shared<Statement>();
  inner->line = line_;
  if (!ParseOperation(i, inner.get())) return false;
  error.inner = std::move(inner);
  return true;
}

bool Parser::ParseLayerExpectation(size_t i, const std::string& what, Statement* s) {
  const std::string statement = "expect " + what;
  if (!Need(i, statement + ": expected a layer name")) return false;
  int layer = -1;
  if (!ParseLayerRef(words_[i], statement, false, &layer)) return false;
  ++i;
  if (what == "trimmable") {
    if (!Need(i, "expect trimmable: expected yes or no")) return false;
    if (words_[i].text != "yes" && words_[i].text != "no") {
      return Fail(words_[i].col, "expect trimmable: expected yes or no, got " +
                                     Quote(words_[i].text));
    }
    s->operation = ExpectTrimmable{layer, words_[i].text == "yes"};
  } else if (what == "kind") {
    if (!Need(i, "expect kind: expected the kind string")) return false;
    s->operation = ExpectKind{layer, std::string(words_[i].text)};
  } else {
    if (!Need(i, "expect bytes_per_token: expected a byte count")) {
      return false;
    }
    int64_t bytes = 0;
    if (!ParseInt(words_[i].text, words_[i].col, &bytes)) return false;
    s->operation = ExpectBytesPerToken{layer, bytes};
  }
  return End(i + 1, statement);
}

bool Parser::ParseQueryHead(size_t i, const std::string& statement,
                            bool attention_only, int* layer, int32_t* row,
                            int32_t* pos, size_t* tail) {
  if (!Need(i, statement + ": expected a layer name")) return false;
  if (!ParseLayerRef(words_[i], statement, attention_only, layer)) return false;
  ++i;

  if (!Need(i, statement + ": expected rROW (like r0)")) return false;
  const Word& row_word = words_[i];
  if (row_word.text[0] != 'r') {
    return Fail(row_word.col, statement + ": expected rROW (like r0), got " +
                                  Quote(row_word.text));
  }
  if (!ParseIntInRange(row_word.text.substr(1), row_word.col + 1, 0,
                       kMaxInteger, "row", row)) {
    return false;
  }
  ++i;

  if (!Need(i, statement + ": expected pPOS: (like p0:)")) return false;
  const Word& pos_word = words_[i];
  if (pos_word.text[0] != 'p') {
    return Fail(pos_word.col, statement + ": expected pPOS: (like p0:), got " +
                                  Quote(pos_word.text));
  }
  const size_t colon = pos_word.text.find(':');
  const std::string_view digits =
      colon == std::string_view::npos ? pos_word.text.substr(1)
                                      : pos_word.text.substr(1, colon - 1);
  if (!ParseIntInRange(digits, pos_word.col + 1, 0, kMaxInteger, "position",
                       pos)) {
    return false;
  }
  if (colon != std::string_view::npos) {
    *tail = static_cast<size_t>(pos_word.col - 1) + colon + 1;
    return true;
  }
  ++i;
  if (i >= words_.size()) {
    return Fail(EndCol(), statement + ": expected ':' after " +
                              Quote(pos_word.text));
  }
  if (words_[i].text[0] != ':') {
    return Fail(words_[i].col, statement + ": expected ':' after " +
                                   Quote(pos_word.text) + ", got " +
                                   Quote(words_[i].text));
  }
  *tail = static_cast<size_t>(words_[i].col - 1) + 1;
  return true;
}

bool Parser::ParseSeen(size_t i, ExpectSees* s) {
  size_t tail = 0;
  if (!ParseQueryHead(i, "expect sees", true, &s->layer, &s->row, &s->pos,
                      &tail)) {
    return false;
  }
  return ScanItems(tail, [&](std::string_view item, int col) {
    SeenItem seen;
    const size_t sep = item.find(':');
    int64_t value = 0;
    if (!ParseInt(item.substr(0, sep), col, &value)) return false;
    seen.pos = static_cast<int32_t>(value);
    seen.id = seen.pos;
    if (sep != std::string_view::npos) {
      if (!ParseInt(item.substr(sep + 1), col + static_cast<int>(sep) + 1,
                    &value)) {
        return false;
      }
      seen.id = static_cast<int32_t>(value);
    }
    s->items.push_back(seen);
    return true;
  });
}

bool Parser::ParseOut(size_t i, ExpectOut* s) {
  size_t tail = 0;
  if (!ParseQueryHead(i, "expect out", false, &s->layer, &s->row, &s->pos,
                      &tail)) {
    return false;
  }
  if (!ScanItems(tail, [&](std::string_view item, int col) {
        double value = 0;
        if (!ParseNumber(item, col, &value)) return false;
        s->values.push_back(value);
        return true;
      })) {
    return false;
  }
  if (s->values.empty()) {
    return Fail(EndCol(), "expect out: expected at least one value");
  }
  return true;
}

template <typename ItemFn>
bool Parser::ScanItems(size_t start, ItemFn&& item) {
  const size_t n = content_.size();
  bool after_item = false;  // an item was read and no comma since
  bool pending_comma = false;
  size_t comma_at = 0;
  size_t i = start;
  while (i < n) {
    const char c = content_[i];
    if (IsBlank(c)) {
      ++i;
      continue;
    }
    if (c == ',') {
      if (!after_item) return Fail(static_cast<int>(i) + 1, "empty list item");
      after_item = false;
      pending_comma = true;
      comma_at = i;
      ++i;
      continue;
    }
    const size_t begin = i;
    while (i < n && !IsBlank(content_[i]) && content_[i] != ',') ++i;
    if (!item(content_.substr(begin, i - begin), static_cast<int>(begin) + 1)) {
      return false;
    }
    after_item = true;
    pending_comma = false;
  }
  if (pending_comma) {
    return Fail(static_cast<int>(comma_at) + 2, "empty list item after ','");
  }
  return true;
}

}  // namespace kvspec::trace::parse_internal
