// OpsGenerator: expectations (mostly right, sometimes wrong in one item)
// and operations the rules refuse in the shadow's state (ops_generator.h).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kvspec/testing/generators.h"
#include "kvspec/testing/ops_generator.h"

namespace kvspec::testing {

// ---- Expectations.

void OpsGenerator::ExpectPositions() {
  std::vector<int32_t> p = Cur().Positions();
  if (Chance(15)) p[static_cast<size_t>(Range(0, Rows() - 1))] += Range(1, 2);
  Line("expect positions " + JoinInts(p));
}

void OpsGenerator::ExpectSees() {
  const Shadow& s = Cur();
  if (!s.has_last || attention_.empty()) return ExpectPositions();
  const size_t l = attention_[static_cast<size_t>(
      Range(0, static_cast<int32_t>(attention_.size()) - 1))];
  const size_t r = static_cast<size_t>(Range(0, Rows() - 1));
  if (s.last_count[r] == 0) return ExpectPositions();
  const int32_t p = s.last_first[r] + Range(0, s.last_count[r] - 1);
  const int32_t W = layers_[l].window;
  const int32_t lo = W ? std::max(0, p - W + 1) : 0;
  std::vector<std::string> items;
  for (int32_t q = lo; q <= p && q < static_cast<int32_t>(s.last_ids[r].size()); ++q) {
    const int32_t id = s.last_ids[r][static_cast<size_t>(q)];
    items.push_back(id == q ? std::to_string(q) : std::to_string(q) + ":" + std::to_string(id));
  }
  switch (Range(0, 9)) {  // mostly right; sometimes wrong in one item
    case 0:
      if (!items.empty()) items.pop_back();
      break;
    case 1:
      items.push_back(std::to_string(p + 1));
      break;
    case 2:  // a wrong id (generated ids are at most 40)
      if (!items.empty()) items.front() = std::to_string(lo) + ":99";
      break;
    case 3:
      std::reverse(items.begin(), items.end());  // order-free
      break;
    default:
      break;
  }
  std::string line = "expect sees " + layers_[l].name + " r" + std::to_string(r) + " p" +
                     std::to_string(p) + ":";
  const char* sep = Chance(30) ? ", " : " ";
  for (size_t i = 0; i < items.size(); ++i) line += (i ? sep : " ") + items[i];
  Line(line);
}

void OpsGenerator::ExpectOther() {
  const LayerShape& layer =
      layers_[static_cast<size_t>(Range(0, static_cast<int32_t>(layers_.size()) - 1))];
  switch (Range(0, 4)) {
    case 0:
      Line("expect trimmable " + layer.name +
           ((layer.ssm || (layer.ring && Cur().peak > layer.capacity)) != Chance(90)
                ? " yes"
                : " no"));
      return;
    case 1: {
      const std::string kind = layer.ssm ? "ssm" : layer.ring ? "rotating" : "kv";
      Line("expect kind " + layer.name + " " +
           (!Cur().batched != Chance(10) ? kind : "batched_" + kind));
      return;
    }
    case 2:
      Line("expect bytes_per_token " + layer.name + " " +
           std::to_string((layer.ssm ? 0 : layer.heads * 2 * KvRowBytes(layer.kv, layer.dim)) +
                          (Chance(10) ? 4 : 0)));
      return;
    default: {
      std::vector<std::string> names;
      for (const auto& entry : layouts_) names.push_back(entry.first);
      Line("expect equal " +
           names[static_cast<size_t>(Range(0, static_cast<int32_t>(names.size()) - 1))]);
      return;
    }
  }
}

// ---- Operations that should be refused.

// The text of an operation the rules refuse in the current state, or ""
// when the chosen kind of refusal is not available here.
std::string OpsGenerator::RefusedOperation() {
  const Shadow& s = Cur();
  const std::string rows_list = JoinInts(std::vector<int32_t>(static_cast<size_t>(Rows()), 0));
  switch (Range(0, 19)) {
    case 0:  // trim more than a row holds
      return "trim " + std::to_string(s.MinCount() + Range(1, 3));
    case 1:  // bypass when the last change was not a window, or beyond it
      if (s.after_window) {
        int32_t bound = INT32_MAX;
        for (int32_t real : s.window_real) bound = std::min(bound, real);
        return "trim " + std::to_string(bound + 1) + " bypass";
      }
      return "trim " + std::to_string(Range(0, s.MinCount())) + " bypass";
    case 2:  // trim while armed
      return s.armed ? "trim 0" : "";
    case 3:  // arm twice
      return s.armed ? "arm" : "";
    case 4:  // accept without a round, before its verify forward, too many
      if (!s.armed || !s.verified) return "accept " + std::to_string(Range(0, 2));
      return "accept " + std::to_string(*std::max_element(s.verify_real.begin(),
                                                          s.verify_real.end()) + 1);
    case 5:  // accept list of the wrong length
      if (Rows() == 1) return "";
      return "accept " + JoinInts(std::vector<int32_t>(static_cast<size_t>(Rows()) + 1, 0));
    case 6:  // a second forward while armed
      return s.armed && s.verified ? (Chance(50) ? "decode" : "window 2") : "";
    case 7: {  // left padding on a row that holds tokens
      for (size_t r = 0; r < s.ids.size(); ++r) {
        if (s.Count(r)) {
          std::vector<int32_t> left(s.ids.size(), 0);
          left[r] = 1;
          return "window 2 left=" + JoinInts(left);
        }
      }
      return "";
    }
    case 8:  // left + right > L
      return "window 2 left=" + rows_list + " right=" +
             JoinInts(std::vector<int32_t>(static_cast<size_t>(Rows()), 3));
    case 9:  // list lengths against rows
      return Chance(50) ? "window 2 right=" + rows_list + ",0"
                        : "window 2 left=" + rows_list + ",0";
    case 10: {  // ids: wrong count in a row, or wrong number of groups
      std::string g;
      for (int r = 0; r < Rows(); ++r) g += (r ? "/" : "") + std::string("1,2,3");
      return Chance(50) ? "window 2 ids=" + g : "decode ids=" + g + "/4";
    }
    case 11:  // fork onto an existing name
      return "fork " + std::string(Chance(50) ? "main" : current_);
    case 12:  // use of an unknown name
      return "use nowhere";
    case 13:  // join of an unknown name, or of the layout into itself
      return Chance(50) ? "join nowhere" : "join " + current_;
    case 14:  // join, filter or extract while armed
      if (!s.armed) return "";
      return Chance(33) ? "filter 0" : Chance(50) ? "extract 0 as xa" : "join nowhere";
    case 15:  // filter of a row that does not exist
      return "filter " + std::to_string(Rows());
    case 16:  // filter rows not strictly ascending
      return Rows() >= 2 && Chance(50) ? "filter 1,0" : "filter 0,0";
    case 17:  // extract of a row that does not exist
      return "extract " + std::to_string(Rows() + Range(0, 2)) + " as xb";
    case 18:  // extract onto an existing name
      return "extract 0 as " + current_;
    default:  // expect equal of an unknown name (a refusal, not a failure)
      return "";
  }
}

void OpsGenerator::ExpectError() {
  const std::string op = RefusedOperation();
  if (!op.empty()) return Line("expect error " + op);
  if (!Chance(30)) return;
  // A valid operation: it runs (the shadow follows), and the expectation
  // fails. The generators below write operations only, or nothing.
  wrap_next_ = true;
  switch (Range(0, 5)) {
    case 0: Window(); break;
    case 1: Decode(); break;
    case 2: Trim(); break;
    case 3: Arm(); break;
    case 4: Fork(); break;
    default: Use(); break;
  }
  wrap_next_ = false;
}

// A refused operation outside `expect error`: the run stops there.
void OpsGenerator::Refused() {
  if (!Chance(25)) return ExpectError();
  std::string op = RefusedOperation();
  if (op.empty()) op = Chance(50) ? "expect equal nowhere" : "expect positions " +
                           JoinInts(std::vector<int32_t>(static_cast<size_t>(Rows()) + 1, 0));
  Line(op);
  stopped_ = true;
}

}  // namespace kvspec::testing
