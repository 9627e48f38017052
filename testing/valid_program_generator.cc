#include "kvspec/testing/valid_program_generator.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kvspec/testing/generators.h"
#include "kvspec/testing/shape_generators.h"

namespace kvspec::testing {

std::string ValidProgramGenerator::Generate() {
  rows_ = Pick(1, 3);
  text_ << "trace 1\nrows " << rows_ << "\n";
  const int layers = Pick(1, 3);
  for (int l = 0; l < layers; ++l) Layer(l);
  LayoutModel main;
  main.positions.assign(static_cast<size_t>(rows_), 0);
  layouts_["main"] = main;
  current_ = "main";
  const int ops = Pick(1, 12);
  for (int i = 0; i < ops; ++i) Operation();
  return text_.str();
}

// ` dim=D`, and a storage type (` kv=TYPE`, testing::DrawKvKey) in some.
std::string ValidProgramGenerator::DimAndType() {
  int dim = Dim();
  const std::string kv = DrawKvKey(c_, &dim);
  return " dim=" + std::to_string(dim) + kv;
}

// ` heads=H`, and in half the layers ` qheads=G*H` (grouped-query
// attention, G query heads per KV head; the kernels take 4 at a time).
std::string ValidProgramGenerator::Heads() {
  const int heads = Pick(1, 3);
  std::string s = " heads=" + std::to_string(heads);
  if (Coin()) s += " qheads=" + std::to_string(heads * Pick(1, 5));
  return s;
}

void ValidProgramGenerator::Layer(int l) {
  const std::string name = "l" + std::to_string(l);
  switch (Pick(0, 3)) {
    case 0:  // kv, sees everything
      text_ << "layer " << name << " kv" << Heads() << DimAndType() << "\n";
      break;
    case 1:  // kv with a sliding window
      text_ << "layer " << name << " kv" << Heads() << DimAndType() << " window=" << Pick(1, 6)
            << "\n";
      break;
    case 2: {  // ring
      const int window = Pick(1, 6);
      const int capacity = window + static_cast<int>(c_.OneOf({0, 0, 1, 3, 8}));
      text_ << "layer " << name << " rotating window=" << window;
      if (capacity != window || Coin()) text_ << " capacity=" << capacity;
      text_ << Heads() << DimAndType() << "\n";
      min_capacity_ = std::min(min_capacity_, capacity);
      break;
    }
    default: {  // recurrent, GQA
      const int kheads = Pick(1, 2);
      const int heads = kheads * Pick(1, 3);
      text_ << "layer " << name << " ssm heads=" << heads << " kheads=" << kheads
            << " dk=" << Pick(1, 5) << " dv=" << Pick(1, 5) << " conv=" << Pick(1, 4) << "\n";
      has_ssm_ = true;
      break;
    }
  }
}

std::vector<ValidProgramGenerator::Kind> ValidProgramGenerator::ValidKinds() {
  const LayoutModel& m = Cur();
  std::vector<Kind> kinds;
  if (!(m.armed && m.verified)) {
    kinds.insert(kinds.end(), {kWindow, kWindow, kWindow, kDecode, kDecode});
  }
  if (!m.armed) {
    if (!has_ssm_ && (!has_rotating() || m.columns_added <= min_capacity_)) {
      kinds.push_back(kTrim);
    }
    if (!has_ssm_ && m.bypass_max >= 0) kinds.insert(kinds.end(), {kBypassTrim, kBypassTrim});
    kinds.insert(kinds.end(), {kRound, kRound, kRound, kArm});
  }
  if (m.armed && m.verified) kinds.insert(kinds.end(), {kAccept, kAccept, kAccept});
  if (forks_ < 3) kinds.push_back(kFork);
  if (layouts_.size() > 1) kinds.push_back(kUse);
  kinds.push_back(kReload);
  return kinds;
}

void ValidProgramGenerator::Operation() {
  const std::vector<Kind> kinds = ValidKinds();  // shrinks towards a window
  switch (kinds[static_cast<size_t>(Pick(0, static_cast<int>(kinds.size()) - 1))]) {
    case kWindow: Window(); break;
    case kDecode: Decode(); break;
    case kTrim: Trim(); break;
    case kBypassTrim: BypassTrim(); break;
    case kRound: Round(); break;
    case kArm: Arm(); break;
    case kAccept: Accept(); break;
    case kFork: Fork(); break;
    case kUse: {
      std::vector<std::string> names;
      for (const auto& [name, model] : layouts_) names.push_back(name);
      current_ = names[static_cast<size_t>(Pick(0, static_cast<int>(names.size()) - 1))];
      text_ << "use " << current_ << "\n";
      break;
    }
    case kReload:
      text_ << "reload\n";
      Cur().bypass_max = -1;
      break;
  }
}

// Ids for `count` tokens: small ones (often equal to some position, so
// the same id comes back at other positions) or large ones.
std::vector<int32_t> ValidProgramGenerator::Ids(int32_t count) {
  std::vector<int32_t> ids;
  for (int32_t j = 0; j < count; ++j) ids.push_back(Coin() ? Pick(0, 999) : Pick(0, 15));
  return ids;
}

// The model after a forward with `real` real tokens per row.
void ValidProgramGenerator::AfterForward(const std::vector<int32_t>& real, bool window) {
  LayoutModel& m = Cur();
  for (int r = 0; r < rows_; ++r) m.positions[r] += real[r];
  if (m.armed) {
    m.verified = true;
    m.round_real = real;
  }
  m.bypass_max = window ? *std::min_element(real.begin(), real.end()) : -1;
}

void ValidProgramGenerator::Window() {
  LayoutModel& m = Cur();
  const int32_t L = Pick(1, 6);
  std::vector<int32_t> left(static_cast<size_t>(rows_), 0), right = left, real = left;
  for (int r = 0; r < rows_; ++r) {
    if (m.positions[r] == 0 && Coin(3)) left[r] = Pick(0, L);
    if (Coin(4)) right[r] = Pick(0, L - left[r]);
    real[r] = L - left[r] - right[r];
  }
  text_ << "window " << L;
  const bool any_left = *std::max_element(left.begin(), left.end()) > 0;
  const bool any_right = *std::max_element(right.begin(), right.end()) > 0;
  if (any_left || Coin(8)) text_ << " left=" << JoinInts(left);
  if (any_right || Coin(8)) text_ << " right=" << JoinInts(right);
  padding_ = padding_ || any_left || any_right;
  if (*std::max_element(real.begin(), real.end()) > 0 && Coin(3)) {
    std::vector<std::string> groups;
    for (int r = 0; r < rows_; ++r) groups.push_back(JoinInts(Ids(real[r])));
    text_ << " ids=";
    for (int r = 0; r < rows_; ++r) text_ << (r ? "/" : "") << groups[r];
  }
  text_ << "\n";
  m.columns_added += L;
  AfterForward(real, /*window=*/true);
}

void ValidProgramGenerator::Decode() {
  text_ << "decode";
  if (Coin(3)) text_ << " ids=" << JoinInts(Ids(rows_), '/');
  text_ << "\n";
  Cur().columns_added += 1;
  AfterForward(std::vector<int32_t>(static_cast<size_t>(rows_), 1), /*window=*/false);
}

void ValidProgramGenerator::Trim() {
  LayoutModel& m = Cur();
  const int32_t most = *std::min_element(m.positions.begin(), m.positions.end());
  const int32_t n = Pick(0, most);
  text_ << "trim " << n << "\n";
  for (int32_t& p : m.positions) p -= n;
  m.bypass_max = -1;
}

void ValidProgramGenerator::BypassTrim() {
  LayoutModel& m = Cur();
  const int32_t n = Pick(0, m.bypass_max);
  text_ << "trim " << n << " bypass\n";
  for (int32_t& p : m.positions) p -= n;
  m.bypass_max = -1;
}

void ValidProgramGenerator::Arm() {
  text_ << "arm\n";
  LayoutModel& m = Cur();
  m.armed = true;
  m.verified = false;
  m.bypass_max = -1;
}

void ValidProgramGenerator::Accept() {
  LayoutModel& m = Cur();
  std::vector<int32_t> keep(static_cast<size_t>(rows_));
  if (rows_ > 1 && Coin()) {
    for (int r = 0; r < rows_; ++r) keep[r] = Pick(0, m.round_real[r]);
    text_ << "accept " << JoinInts(keep) << "\n";
  } else {
    const int32_t k = Pick(0, *std::min_element(m.round_real.begin(), m.round_real.end()));
    keep.assign(keep.size(), k);
    text_ << "accept " << k << "\n";
  }
  for (int r = 0; r < rows_; ++r) {
    m.positions[r] -= m.round_real[r] - keep[r];
    partial_accept_ = partial_accept_ || keep[r] < m.round_real[r];
  }
  m.armed = false;
  m.verified = false;
  m.bypass_max = -1;
  ++rounds_;
}

void ValidProgramGenerator::Fork() {
  const std::string name = "f" + std::to_string(forks_++);
  text_ << "fork " << name << "\n";
  LayoutModel copy = Cur();
  copy.bypass_max = -1;  // only ever bypass-trim right after one's own window
  layouts_[name] = copy;
}

// arm; a verify window (or a decode as a one-token round); sometimes a
// fork of the armed round accepted differently; accept.
void ValidProgramGenerator::Round() {
  Arm();
  if (Coin(4)) {
    Decode();
  } else {
    Window();
  }
  if (forks_ < 3 && Coin(4)) {
    const std::string before = current_;
    Fork();
    current_ = "f" + std::to_string(forks_ - 1);
    text_ << "use " << current_ << "\n";
    Accept();
    current_ = before;
    text_ << "use " << current_ << "\n";
  }
  Accept();
}

}  // namespace kvspec::testing
