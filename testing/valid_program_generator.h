// Random small trace programs the runner accepts (TRACE.md "Precise
// rules"), as text, for the values property (values_props): 1-3 rows; 1-3
// layers of kv, kv with a window, rotating and ssm with GQA and conv
// kernels 1-4; 1-12 operations: windows with left/right padding and ids,
// decodes, trims and bypass trims where valid, speculative rounds with
// uniform and per-row partial accepts, fork/use and reload. A small model
// of each layout keeps every operation valid.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kvspec/testing/choices.h"

namespace kvspec::testing {

class ValidProgramGenerator {
 public:
  explicit ValidProgramGenerator(Choices* choices) : c_(*choices) {}

  std::string Generate();

  bool has_ssm() const { return has_ssm_; }
  bool has_rotating() const { return min_capacity_ < std::numeric_limits<int>::max(); }
  bool had_partial_accept() const { return partial_accept_; }
  bool had_round() const { return rounds_ > 0; }
  bool had_padding() const { return padding_; }

 private:
  // What validity depends on, per named layout.
  struct LayoutModel {
    std::vector<int32_t> positions;  // real tokens per row
    bool armed = false;
    bool verified = false;
    std::vector<int32_t> round_real;  // real tokens of the verify forward
    // Minimum real count of the window that was the last change, or -1
    // (a bypass trim of up to that many is valid).
    int32_t bypass_max = -1;
    // Columns ever added: while this stays <= every ring's capacity no ring
    // has wrapped (conservative: trims do not give columns back here).
    int64_t columns_added = 0;
  };

  enum Kind { kWindow, kDecode, kTrim, kBypassTrim, kRound, kArm, kAccept, kFork, kUse, kReload };

  // An integer in [lo, hi]; shrinks towards lo.
  int Pick(int lo, int hi) { return static_cast<int>(c_.Range(lo, hi)); }
  // True one time in `one_in`; shrinks towards false.
  bool Coin(int one_in = 2) { return Pick(1, one_in) == one_in; }
  // A head size: mostly small, one layer in four wide enough for every
  // SIMD path of the attention kernels (whole vectors and tails).
  int Dim() { return Coin(4) ? Pick(7, 40) : Pick(1, 6); }
  LayoutModel& Cur() { return layouts_[current_]; }

  std::string Heads();
  std::string DimAndType();
  void Layer(int l);
  std::vector<Kind> ValidKinds();
  void Operation();
  std::vector<int32_t> Ids(int32_t count);
  void AfterForward(const std::vector<int32_t>& real, bool window);
  void Window();
  void Decode();
  void Trim();
  void BypassTrim();
  void Arm();
  void Accept();
  void Fork();
  void Round();

  Choices& c_;
  int rows_ = 1;
  std::ostringstream text_;
  std::map<std::string, LayoutModel> layouts_;
  std::string current_;
  int forks_ = 0;
  int min_capacity_ = std::numeric_limits<int>::max();
  bool has_ssm_ = false;
  bool partial_accept_ = false;
  bool padding_ = false;
  int rounds_ = 0;
};

}  // namespace kvspec::testing
