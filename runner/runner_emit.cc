// What the runner prints: `sees` / `out` / `state` lines on standard output,
// refusals on standard error, and with --emit the trace itself, echoed line
// by line with the expectations the run regenerates put after the
// statements that produced them.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <string>
#include <vector>

#include "kvspec/runner/runner_internal.h"

namespace kvspec::trace::runner_internal {

// std::to_chars with chars_format::general and a precision is specified to
// print what printf's "%.9g" prints (nan, inf, -0 and subnormals included),
// without printf's cost: every `out` value of every forward goes through here.
void AppendValue(std::string* s, float v) {
  char buf[32];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, static_cast<double>(v),
                                               std::chars_format::general, 9);
  s->append(buf, r.ptr);
}

std::string FormatValue(float v) {
  std::string s;
  AppendValue(&s, v);
  return s;
}

void AppendInt(std::string* s, int32_t v) {
  char buf[16];
  s->append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

void AppendTags(std::string* s, const std::vector<Tag>& tags) {
  // Formatted in place (a forward can print tens of millions of tags).
  for (const Tag& t : tags) {
    *s += ' ';
    if (t.kind != Tag::kToken) {
      *s += t.ToString();
      continue;
    }
    AppendInt(s, t.pos);
    if (t.id != t.pos) {
      *s += ':';
      AppendInt(s, t.id);
    }
  }
}

std::string JoinTags(const std::vector<Tag>& tags) {
  std::string s;
  s.reserve(tags.size() * 6);
  AppendTags(&s, tags);
  return s;
}

std::string JoinInts(const std::vector<int32_t>& v, char sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += sep;
    s += std::to_string(v[i]);
  }
  return s;
}

void Runner::Refusal(int line, const std::string& message) {
  err_ << p_.file << ":" << line << ": error: " << message << "\n";
  status_ = std::max(status_, 1);
}

int Runner::Finish(int last_line) {
  if (opt_.emit) {
    for (int line = 1; line <= last_line && line <= static_cast<int>(p_.lines.size()); ++line) {
      if (!drop_lines_.count(line)) out_ << p_.lines[line - 1] << "\n";
      auto it = emit_after_.find(line);
      if (it != emit_after_.end()) {
        for (const std::string& s : it->second) out_ << s << "\n";
      }
    }
  }
  return status_;
}

void Runner::Print(const std::string& line) {
  if (!opt_.emit) out_ << line << "\n";
}

void Runner::EmitAfter(const Statement& st, std::string line) {
  if (opt_.emit && top_level_) emit_after_[st.line].push_back(std::move(line));
}

void Runner::EmitPositions(const Statement& st) {
  // Built only when it is emitted (this runs after every forward).
  if (opt_.emit && top_level_) EmitAfter(st, "expect positions " + JoinInts(Cur().positions()));
}

void Runner::PrintStates() {
  Layout& layout = Cur();
  for (size_t l = 0; l < layout.size(); ++l) {
    const SsmCacheBase* ssm = layout.recurrent(l);
    if (!ssm) continue;
    for (int r = 0; r < layout.rows(); ++r) {
      char hash[17];
      std::snprintf(hash, sizeof(hash), "%016llx",
                    static_cast<unsigned long long>(StateHash(*ssm, r)));
      Print("state " + p_.layers[l].name + " r" + std::to_string(r) + " " + hash);
    }
  }
}

// Calls f(line) for each '\n'-ended line of `text`, without its '\n'.
template <class F>
static void ForEachLine(const std::string& text, F&& f) {
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    f(text.substr(at, end - at));
    at = end + 1;
  }
}

// A forward's lines: `sees` lines, `out` lines (with --values), the states,
// and for --emit the matching expectations after its statement.
void Runner::PrintForward(const Statement& st, const ForwardLines& lines) {
  if (!opt_.emit) {
    // What Print prints for each line: the line and its '\n'.
    out_ << lines.sees;
    if (opt_.values) out_ << lines.outs;
  } else if (top_level_) {
    // The `expect` lines are built only when they are emitted.
    ForEachLine(lines.sees, [&](std::string line) { EmitAfter(st, "expect " + line); });
    if (opt_.values) {
      ForEachLine(lines.outs, [&](std::string line) { EmitAfter(st, "expect " + line); });
    }
  }
  PrintStates();
  EmitPositions(st);
}

}  // namespace kvspec::trace::runner_internal
