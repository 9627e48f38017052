// Words of a trace line: integers, comma lists, id groups, numbers, names
// and layer references, each checked as the contract in parse.cc states.
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "kvspec/trace/parse_internal.h"

namespace kvspec::trace::parse_internal {
namespace {

constexpr size_t kMaxNumberChars = 100;  // `expect out` values
constexpr size_t kMaxQuotedChars = 40;   // words quoted in messages

}  // namespace

std::string Quote(std::string_view s) {
  std::string out = "'";
  if (s.size() > kMaxQuotedChars) {
    out.append(s.substr(0, kMaxQuotedChars));
    out += "...";
  } else {
    out.append(s);
  }
  out += "'";
  return out;
}

size_t InvalidNameAt(std::string_view s) {
  if (s.empty() || !(s[0] >= 'a' && s[0] <= 'z')) return 0;
  for (size_t i = 1; i < s.size(); ++i) {
    const char c = s[i];
    if (!((c >= 'a' && c <= 'z') || IsDigit(c) || c == '_')) return i;
  }
  return std::string_view::npos;
}

bool IsOperationKeyword(std::string_view w) {
  return w == "window" || w == "decode" || w == "trim" || w == "arm" ||
         w == "accept" || w == "fork" || w == "use" || w == "join" ||
         w == "filter" || w == "extract" || w == "reload";
}

bool Parser::CountForkExtract(const Word& keyword) {
  if (++fork_extract_ <= kMaxForkExtract) return true;
  return Fail(keyword.col, "more than " + std::to_string(kMaxForkExtract) +
                               " fork and extract statements");
}

bool Parser::ParseInt(std::string_view s, int col, int64_t* value) {
  if (s.empty()) return Fail(col, "expected an integer");
  int64_t v = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!IsDigit(s[i])) {
      return Fail(col + static_cast<int>(i),
                  "expected a non-negative decimal integer, got " + Quote(s));
    }
  }
  for (const char c : s) {
    v = v * 10 + (c - '0');  // v <= kMaxInteger before, so no overflow
    if (v > kMaxInteger) {
      return Fail(col, "integer " + Quote(s) + " is out of range (at most " +
                           std::to_string(kMaxInteger) + ")");
    }
  }
  *value = v;
  return true;
}

bool Parser::ParseIntInRange(std::string_view s, int col, int64_t lo,
                             int64_t hi, const std::string& what,
                             int32_t* value) {
  int64_t v = 0;
  if (!ParseInt(s, col, &v)) return false;
  if (v < lo || v > hi) {
    return Fail(col, what + " must be in " + std::to_string(lo) + ".." +
                         std::to_string(hi) + ", got " + std::to_string(v));
  }
  *value = static_cast<int32_t>(v);
  return true;
}

bool Parser::ParseIntList(std::string_view s, int col,
                          std::vector<int32_t>* out) {
  size_t begin = 0;
  while (true) {
    size_t end = s.find(',', begin);
    if (end == std::string_view::npos) end = s.size();
    const int item_col = col + static_cast<int>(begin);
    if (end == begin) {
      return Fail(item_col, s.empty() ? "expected a list of integers"
                                      : "empty list item");
    }
    int64_t v = 0;
    if (!ParseInt(s.substr(begin, end - begin), item_col, &v)) return false;
    out->push_back(static_cast<int32_t>(v));
    if (end == s.size()) return true;
    begin = end + 1;
  }
}

bool Parser::ParseIdGroups(std::string_view s, int col,
                           std::vector<std::vector<int32_t>>* out) {
  size_t begin = 0;
  while (true) {
    size_t end = s.find('/', begin);
    if (end == std::string_view::npos) end = s.size();
    out->emplace_back();
    if (end > begin && !ParseIntList(s.substr(begin, end - begin),
                                     col + static_cast<int>(begin),
                                     &out->back())) {
      return false;
    }
    if (end == s.size()) return true;
    begin = end + 1;
  }
}

bool Parser::ParseNumber(std::string_view s, int col, double* value) {
  if (s.size() > kMaxNumberChars) {
    return Fail(col, "number too long (more than " +
                         std::to_string(kMaxNumberChars) + " characters)");
  }
  // [+-]?(D+(.D*)?|.D+)([eE][+-]?D+)?
  size_t i = 0;
  const auto bad = [&](size_t at) {
    return Fail(col + static_cast<int>(at),
                "expected a decimal number, got " + Quote(s));
  };
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  size_t mantissa_digits = 0;
  for (; i < s.size() && IsDigit(s[i]); ++i) ++mantissa_digits;
  if (i < s.size() && s[i] == '.') {
    for (++i; i < s.size() && IsDigit(s[i]); ++i) ++mantissa_digits;
  }
  if (mantissa_digits == 0) return bad(i < s.size() ? i : s.size() - 1);
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exponent_digits = 0;
    for (; i < s.size() && IsDigit(s[i]); ++i) ++exponent_digits;
    if (exponent_digits == 0) return bad(i < s.size() ? i : s.size() - 1);
  }
  if (i != s.size()) return bad(i);

  const std::string copy(s);  // NUL-terminated, bounded by kMaxNumberChars
  char* end = nullptr;
  const double v = std::strtod(copy.c_str(), &end);
  if (end != copy.c_str() + copy.size()) return bad(0);
  if (!std::isfinite(v)) {
    return Fail(col, "number " + Quote(s) + " is not finite in double");
  }
  *value = v;
  return true;
}

bool Parser::ParseName(const Word& w, const std::string& statement,
                       std::string* out) {
  const size_t bad = InvalidNameAt(w.text);
  if (bad != std::string_view::npos) {
    return Fail(w.col + static_cast<int>(bad),
                statement + ": invalid name " + Quote(w.text) +
                    " (names match [a-z][a-z0-9_]*)");
  }
  *out = std::string(w.text);
  return true;
}

bool Parser::ParseLayerRef(const Word& w, const std::string& statement,
                           bool attention_only, int* index) {
  const int found = FindLayer(*program_, w.text);
  if (found < 0) {
    return Fail(w.col, statement + ": unknown layer " + Quote(w.text));
  }
  const LayerConfig& layer = program_->layers[static_cast<size_t>(found)];
  if (attention_only && layer.kind == CacheKind::kSsm) {
    return Fail(w.col, statement + ": layer " + Quote(w.text) +
                           " is ssm; only kv and rotating layers have "
                           "attention queries");
  }
  *index = found;
  return true;
}

}  // namespace kvspec::trace::parse_internal
