#include "kvspec/testing/limits_generator.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvspec::testing {
namespace {

std::string Num(int64_t v) { return std::to_string(v); }

}  // namespace

std::string LimitsGenerator::Generate() {
  rows_ = Near(1, 64);
  text_ = "trace 1\nrows " + std::to_string(rows_) + "\n";
  const int layers = Chance(5) ? Near(1, 32) : Range(1, 3);
  for (int l = 0; l < layers; ++l) Layer(l);
  for (size_t i = 0; i < kMaxStatements && !c_.Exhausted() && text_.size() < kMaxText; ++i) {
    Statement();
  }
  return text_;
}

// A value in lo..hi, mostly at or near an end: a limit, one below it, a
// power of two, a small value or any.
int64_t LimitsGenerator::Near(int64_t lo, int64_t hi) {
  switch (Range(0, 7)) {
    case 0: return hi;
    case 1: return std::max(lo, hi - 1);
    case 2: {
      int64_t p = 1;
      for (int64_t k = Range(0, 31); k > 0 && p * 2 <= hi; --k) p *= 2;
      return std::max(lo, p);
    }
    case 3: return lo;
    case 4: return std::min(hi, lo + Range(0, 3));
    default: return Range(lo, hi);
  }
}

void LimitsGenerator::Line(const std::string& s) {
  if (text_.size() + s.size() < kMaxText) text_ += s + "\n";
}

std::string LimitsGenerator::RowList(int64_t lo, int64_t hi) {
  std::string s;
  for (int r = 0; r < rows_; ++r) s += (r ? "," : "") + Num(Near(lo, hi));
  return s;
}

void LimitsGenerator::Layer(int l) {
  const int kind = static_cast<int>(Range(0, 2));
  const std::string name = "l" + Num(l);
  if (kind == 2) {
    const int64_t heads = Near(1, 64);
    std::string line = "layer " + name + " ssm heads=" + Num(heads);
    if (Chance(50)) {  // a divisor of heads, or sometimes not (a syntax error)
      int64_t k = Near(1, heads);
      while (!Chance(5) && heads % k != 0) --k;
      line += " kheads=" + Num(k);
    }
    if (Chance(80)) line += " dk=" + Num(Near(1, 512));
    if (Chance(80)) line += " dv=" + Num(Near(1, 512));
    if (Chance(80)) line += " conv=" + Num(Near(1, 64));
    return Line(line);
  }
  std::string line = "layer " + name + (kind == 1 ? " rotating" : " kv") +
                     " heads=" + Num(Near(1, 64)) + " dim=" + Num(Near(1, 512));
  const int64_t window = Near(1, 65536);
  if (kind == 1 || Chance(50)) line += " window=" + Num(window);
  if (kind == 1 && Chance(50)) line += " capacity=" + Num(Near(window, 65536));
  // A storage type, whatever the dim (a block type needs a multiple of 32:
  // the others are header errors).
  if (Chance(20)) line += std::string(" kv=") + KvTypeName(static_cast<KvType>(Range(0, 3)));
  Line(line);
}

void LimitsGenerator::Forward() {
  const bool decode = Chance(20);
  const int64_t L = decode ? 1 : Near(1, 4096);
  std::string line = decode ? "decode" : "window " + Num(L);
  if (!decode && Chance(20)) line += " left=" + RowList(0, L);
  if (!decode && Chance(20)) line += " right=" + RowList(0, L);
  if (rows_ * L <= 8192 && Chance(30)) {  // ids up to 2^31 - 1; the count is right when unpadded
    std::string groups;
    for (int r = 0; r < rows_; ++r) {
      if (r) groups += "/";
      const int64_t n = Chance(90) ? L : Range(0, L);
      for (int64_t j = 0; j < n; ++j) groups += (j ? "," : "") + Num(Near(0, 2147483647));
    }
    line += " ids=" + groups;
  }
  // Repeats fill rows towards 1,000,000 tokens (TRACE.md's limit per row).
  const int64_t repeats = Chance(10) ? Near(1, 300) : 1;
  for (int64_t i = 0; i < repeats; ++i) Line(line);
}

void LimitsGenerator::Statement() {
  switch (Range(0, 15)) {
    case 0: case 1: case 2: case 3: case 4:
      return Forward();
    case 5:
      return Line("trim " + Num(Near(0, 65536)) + (Chance(50) ? " bypass" : ""));
    case 6:
      return Line("arm");
    case 7:
      return Line("accept " + (Chance(50) ? Num(Near(0, 4096)) : RowList(0, 4096)));
    case 8:
      return Line("fork f" + Num(forks_++));
    case 9:
      return Line("use " + (forks_ && Chance(80) ? "f" + Num(Range(0, forks_ - 1)) : "main"));
    case 10:
      return Line("join " + (forks_ ? "f" + Num(Range(0, forks_ - 1)) : std::string("main")));
    case 11:
      return Line("filter " + Num(Range(0, rows_ - 1)) +
                  (Chance(50) && rows_ > 1 ? "," + Num(rows_ - 1) : ""));
    case 12:
      return Line("extract " + Num(Near(0, rows_)) + " as f" + Num(forks_++));
    case 13:
      return Line("reload");
    case 14:
      return Line("expect positions " + RowList(0, 1000000));
    default:
      return Line("expect equal " + (forks_ ? "f" + Num(Range(0, forks_ - 1))
                                            : std::string("main")));
  }
}

}  // namespace kvspec::testing
