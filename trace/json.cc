#include "kvspec/trace/json.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace kvspec::trace {

namespace {

void String(std::string* out, std::string_view s) {
  *out += '"';
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      *out += '\\';
      *out += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", u);
      *out += buf;
    } else {
      *out += c;
    }
  }
  *out += '"';
}

void Key(std::string* out, std::string_view key) {
  *out += ", ";
  String(out, key);
  *out += ": ";
}

void Ints(std::string* out, const std::vector<int32_t>& v) {
  *out += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) *out += ", ";
    *out += std::to_string(v[i]);
  }
  *out += ']';
}

// A list given only with its flag: null when the statement did not give it.
void OptionalInts(std::string* out, bool has, const std::vector<int32_t>& v) {
  if (has) {
    Ints(out, v);
  } else {
    *out += "null";
  }
}

void Groups(std::string* out, bool has, const std::vector<std::vector<int32_t>>& groups) {
  if (!has) {
    *out += "null";
    return;
  }
  *out += '[';
  for (size_t i = 0; i < groups.size(); ++i) {
    if (i) *out += ", ";
    Ints(out, groups[i]);
  }
  *out += ']';
}

const std::vector<int>* g_source_lines = nullptr;  // set while ProgramToJson runs

void WriteStatement(std::string* out, const Program& p, const trace::Statement& st);

// The fields of an expectation, its LAYER as the layer's name.
void ExpectationFields(std::string* out, const Program& p, const trace::Statement& st);

// The fields of a statement after "line" and "op".
void Fields(std::string* out, const Program& p, const trace::Statement& st) {
  switch (st.op()) {
    case Op::kWindow: {
      const WindowOp& w = st.Get<WindowOp>();
      Key(out, "columns");
      *out += std::to_string(w.columns);
      Key(out, "left");
      OptionalInts(out, w.has_left, w.left);
      Key(out, "right");
      OptionalInts(out, w.has_right, w.right);
      Key(out, "ids");
      Groups(out, w.has_ids, w.ids);
      return;
    }
    case Op::kDecode: {
      const DecodeOp& d = st.Get<DecodeOp>();
      Key(out, "ids");
      Groups(out, d.has_ids, d.ids);
      return;
    }
    case Op::kTrim:
      Key(out, "count");
      *out += std::to_string(st.Get<TrimOp>().count);
      Key(out, "bypass");
      *out += st.Get<TrimOp>().bypass ? "true" : "false";
      return;
    case Op::kArm:
    case Op::kReload:
      return;
    case Op::kAccept:
      Key(out, "keep");
      Ints(out, st.Get<AcceptOp>().keep);
      return;
    case Op::kFork:
      Key(out, "name");
      String(out, st.Get<ForkOp>().name);
      return;
    case Op::kUse:
      Key(out, "name");
      String(out, st.Get<UseOp>().name);
      return;
    case Op::kJoin:
      Key(out, "name");
      String(out, st.Get<JoinOp>().name);
      return;
    case Op::kFilter:
      Key(out, "rows");
      Ints(out, st.Get<FilterOp>().rows);
      return;
    case Op::kExtract:
      Key(out, "row");
      *out += std::to_string(st.Get<ExtractOp>().row);
      Key(out, "name");
      String(out, st.Get<ExtractOp>().name);
      return;
    default:
      ExpectationFields(out, p, st);
      return;
  }
}

void ExpectationFields(std::string* out, const Program& p, const trace::Statement& st) {
  auto layer = [&](int index) {
    Key(out, "layer");
    String(out, p.layers[static_cast<size_t>(index)].name);
  };
  switch (st.op()) {
    case Op::kExpectSees: {
      const ExpectSees& e = st.Get<ExpectSees>();
      layer(e.layer);
      Key(out, "row");
      *out += std::to_string(e.row);
      Key(out, "pos");
      *out += std::to_string(e.pos);
      Key(out, "items");
      *out += '[';
      for (size_t i = 0; i < e.items.size(); ++i) {
        if (i) *out += ", ";
        *out += "[" + std::to_string(e.items[i].pos) + ", " + std::to_string(e.items[i].id) + "]";
      }
      *out += ']';
      return;
    }
    case Op::kExpectOut: {
      const ExpectOut& e = st.Get<ExpectOut>();
      layer(e.layer);
      Key(out, "row");
      *out += std::to_string(e.row);
      Key(out, "pos");
      *out += std::to_string(e.pos);
      Key(out, "values");
      *out += '[';
      for (size_t i = 0; i < e.values.size(); ++i) {
        if (i) *out += ", ";
        char buf[40];
        std::snprintf(buf, sizeof(buf), "%.17g", e.values[i]);
        *out += buf;
      }
      *out += ']';
      return;
    }
    case Op::kExpectPositions:
      Key(out, "positions");
      Ints(out, st.Get<ExpectPositions>().positions);
      return;
    case Op::kExpectError:
      Key(out, "inner");
      WriteStatement(out, p, *st.Get<ExpectError>().inner);
      return;
    case Op::kExpectEqual:
      Key(out, "name");
      String(out, st.Get<ExpectEqual>().name);
      return;
    case Op::kExpectTrimmable:
      layer(st.Get<ExpectTrimmable>().layer);
      Key(out, "yes");
      *out += st.Get<ExpectTrimmable>().yes ? "true" : "false";
      return;
    case Op::kExpectKind:
      layer(st.Get<ExpectKind>().layer);
      Key(out, "kind");
      String(out, st.Get<ExpectKind>().kind_string);
      return;
    case Op::kExpectBytesPerToken:
      layer(st.Get<ExpectBytesPerToken>().layer);
      Key(out, "bytes");
      *out += std::to_string(st.Get<ExpectBytesPerToken>().bytes);
      return;
    default:
      return;  // an operation: Fields
  }
}

void WriteStatement(std::string* out, const Program& p, const trace::Statement& st) {
  *out += "{\"line\": " + std::to_string(st.line);
  if (g_source_lines && st.line >= 1 &&
      static_cast<size_t>(st.line) <= g_source_lines->size()) {
    Key(out, "source_line");
    *out += std::to_string((*g_source_lines)[static_cast<size_t>(st.line) - 1]);
  }
  Key(out, "op");
  String(out, OpName(st.op()));
  Fields(out, p, st);
  *out += '}';
}

std::vector<std::string_view> SplitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

// Whether the emitter may have dropped this original line (an expectation
// it regenerates).
// Words are separated by blanks and tabs, as the parser reads them
// (`expect\tsees` is an `expect sees`).
bool Regenerated(std::string_view line) {
  const size_t first = line.find_first_not_of(" \t");
  if (first == std::string_view::npos) return false;
  line.remove_prefix(first);
  const size_t end = std::min(line.find_first_of(" \t"), line.size());
  if (line.substr(0, end) != "expect") return false;
  line.remove_prefix(end);
  const size_t second = line.find_first_not_of(" \t");
  if (second == std::string_view::npos) return false;
  line.remove_prefix(second);
  const std::string_view word = line.substr(0, std::min(line.find_first_of(" \t"), line.size()));
  return word == "sees" || word == "positions" || word == "out";
}

}  // namespace

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kWindow: return "window";
    case Op::kDecode: return "decode";
    case Op::kTrim: return "trim";
    case Op::kArm: return "arm";
    case Op::kAccept: return "accept";
    case Op::kFork: return "fork";
    case Op::kUse: return "use";
    case Op::kJoin: return "join";
    case Op::kFilter: return "filter";
    case Op::kExtract: return "extract";
    case Op::kReload: return "reload";
    case Op::kExpectSees: return "expect sees";
    case Op::kExpectOut: return "expect out";
    case Op::kExpectPositions: return "expect positions";
    case Op::kExpectError: return "expect error";
    case Op::kExpectEqual: return "expect equal";
    case Op::kExpectTrimmable: return "expect trimmable";
    case Op::kExpectKind: return "expect kind";
    case Op::kExpectBytesPerToken: return "expect bytes_per_token";
  }
  return "";
}

std::vector<int> SourceLines(std::string_view original, std::string_view emitted) {
  const std::vector<std::string_view> from = SplitLines(original), to = SplitLines(emitted);
  std::vector<int> map(to.size(), 0);
  size_t next = 0;  // the next original line not yet matched
  int last = 0;
  for (size_t e = 0; e < to.size(); ++e) {
    // The next original line equal to this one, skipping only lines the
    // emitter drops.
    size_t j = next;
    while (j < from.size() && from[j] != to[e] && Regenerated(from[j])) ++j;
    if (j < from.size() && from[j] == to[e]) {
      last = static_cast<int>(j) + 1;
      next = j + 1;
    }
    map[e] = last;
  }
  return map;
}

std::string ProgramToJson(const Program& p, const std::vector<int>* source_lines) {
  g_source_lines = source_lines;
  std::string out = "{\"format\": \"kvspec-trace-json\", \"version\": 1";
  Key(&out, "file");
  String(&out, p.file);
  Key(&out, "rows");
  out += std::to_string(p.rows);
  Key(&out, "header_end_line");
  out += std::to_string(p.header_end_line);
  Key(&out, "layers");
  out += "[";
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const LayerConfig& c = p.layers[l];
    out += l ? ",\n  {" : "\n  {";
    out += "\"name\": ";
    String(&out, c.name);
    Key(&out, "kind");
    String(&out, KindName(c.kind));
    Key(&out, "kv");
    String(&out, KvTypeName(c.kv));
    const std::pair<const char*, int64_t> ints[] = {
        {"line", l < p.layer_lines.size() ? p.layer_lines[l] : 0},
        {"heads", c.heads}, {"qheads", c.QueryHeads()}, {"dim", c.dim},
        {"window", c.window}, {"capacity", c.capacity}, {"kheads", c.KeyHeads()},
        {"dk", c.dk}, {"dv", c.dv}, {"conv", c.conv}};
    for (const auto& [name, value] : ints) {
      Key(&out, name);
      out += std::to_string(value);
    }
    out += "}";
  }
  out += "]";
  Key(&out, "statements");
  out += "[";
  for (size_t i = 0; i < p.body.size(); ++i) {
    out += i ? ",\n  " : "\n  ";
    WriteStatement(&out, p, p.body[i]);
  }
  out += "]}\n";
  g_source_lines = nullptr;
  return out;
}

}  // namespace kvspec::trace
