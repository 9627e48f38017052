#include "kvspec/properties/regression_writer.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include "kvspec/runner/runner.h"
#include "kvspec/testing/values_oracle.h"

#ifndef KVSPEC_SOURCE_DIR
#error "KVSPEC_SOURCE_DIR (the source tree) must be defined"
#endif
#ifndef KVSPEC_BINARY_DIR
#error "KVSPEC_BINARY_DIR (the build tree) must be defined"
#endif

namespace rc::detail {
// RapidCheck's own encoding of RC_PARAMS="reproduce=..." (exported by the
// library, not declared in its installed headers).
std::string reproduceMapToString(const std::unordered_map<std::string, Reproduce>& map);
}  // namespace rc::detail

namespace kvspec::regress {

Recorder& Recorder::Get() {
  static Recorder recorder;
  return recorder;
}

void Recorder::Begin(const std::string& header, const std::string& note) {
  current_ = Case();
  current_.begun = true;
  current_.header = header;
  current_.note = note;
}

void Recorder::Statement(const std::string& line, bool forward) {
  current_.lines.push_back(Line{line, forward});
}

void Recorder::Expect(const std::string& line) { current_.lines.push_back(Line{line, false}); }

void Recorder::ResetProperty() {
  current_ = Case();
  failed_ = Case();
  have_failure_ = false;
}

void Recorder::CaseFailed() {
  if (!current_.begun) return;
  failed_ = current_;
  have_failure_ = true;
}

std::string Recorder::FailureBody() const {
  std::string body = failed_.header;
  if (!body.empty() && body.back() != '\n') body += '\n';
  for (const Line& l : failed_.lines) body += l.text + "\n";
  return body;
}

namespace {

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Adds the oracle's `expect out` lines after every forward of `body` (a
// trace whose forwards the oracle can run). Returns `body` unchanged, with
// a comment, when the oracle cannot run it.
std::string WithOutputs(const std::string& body) {
  const oracle::Result result = oracle::Evaluate(body);
  std::map<int, std::vector<std::string>> after_line;  // 1-based line -> out lines
  for (const oracle::Step& step : result.steps) {
    if (!step.forward) continue;
    for (const oracle::Query& q : step.queries) {
      std::string line = "expect out " + q.layer_name + " r" + std::to_string(q.row) + " p" +
                         std::to_string(q.pos) + ":";
      for (double v : q.values) line += " " + oracle::FormatValue(v);
      after_line[step.line].push_back(line);
    }
  }
  // A forward's `expect out` lines go after its other expectations, before
  // the next statement.
  std::istringstream in(body);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::string out;
  std::vector<std::string> pending;
  auto flush = [&] {
    for (const std::string& p : pending) out += p + "\n";
    pending.clear();
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    const bool expectation = lines[i].rfind("expect ", 0) == 0 &&
                             lines[i].rfind("expect error ", 0) != 0;
    if (!expectation) flush();
    out += lines[i] + "\n";
    const auto it = after_line.find(static_cast<int>(i) + 1);
    if (it != after_line.end()) pending = it->second;
  }
  flush();
  if (!result.ok) {
    out += "# (the values oracle stopped: " + result.error + "; no `expect out` after that)\n";
  }
  return out;
}

std::string SelfPath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "PROPERTY_BINARY";
  return std::string(buf, static_cast<size_t>(n));
}

// The first lines of `message`, each as a comment line.
std::string CommentLines(const std::string& message, int max_lines) {
  std::istringstream in(message);
  std::string out;
  int n = 0;
  for (std::string l; std::getline(in, l);) {
    if (l.empty()) continue;
    if (n++ == max_lines) {
      out += "#   ...\n";
      break;
    }
    if (l.size() > 200) l = l.substr(0, 200) + " ...";
    out += "#   " + l + "\n";
  }
  return out;
}

}  // namespace

std::string RegressionDir() {
  if (const char* env = std::getenv("KVSPEC_REGRESSION_DIR")) {
    const std::string dir = env;
    if (dir == "off") return "";
    if (!dir.empty()) return dir;
  }
  return std::string(KVSPEC_BINARY_DIR) + "/regressions/properties";
}

std::string SourceRegressionDir() {
  return std::string(KVSPEC_SOURCE_DIR) + "/corpus/regressions/properties";
}

std::string KvspecCommand() { return std::string(KVSPEC_BINARY_DIR) + "/kvspec"; }

std::string WriteRegression(const std::string& property, const std::string& binary,
                            const std::string& target, uint64_t seed,
                            const std::string& reproduce, const std::string& message,
                            std::ostream& log) {
  Recorder& rec = Recorder::Get();
  const std::string dir = RegressionDir();
  if (!rec.HasFailure() || dir.empty()) return "";
  const std::string body = WithOutputs(rec.FailureBody());
  // The file is named after the property without its suite and target:
  // "Targets/LayoutTargets.KvOperationSequencesMatchTheModel/AVX2" ->
  // KvOperationSequencesMatchTheModel-HASH.trace (HASH: of the case, so the
  // same shrunk case found on two targets is one file).
  std::string dot_free = property.substr(property.find('.') + 1);
  dot_free = dot_free.substr(0, dot_free.find('/'));
  char hash[9];
  std::snprintf(hash, sizeof(hash), "%08x", static_cast<unsigned>(Fnv1a(body) & 0xffffffffu));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = dir + "/" + dot_free + "-" + hash + ".trace";

  std::ostringstream text;
  text << "# A failure of the RapidCheck property " << property << ", shrunk, written by\n"
       << "# properties/regression_writer.cc. The expectations are what the property's model\n"
       << "# (and, for `expect out`, the double-precision oracle) says should happen: a correct\n"
       << "# build runs this trace with exit 0; ctest replays it (label regression).\n";
  if (!rec.FailureNote().empty()) text << "# " << rec.FailureNote() << "\n";
  const std::string target_flag = target.empty() ? "" : "--target " + target + " ";
  if (!target.empty()) text << "# target: " << target << "\n";
  text << "# seed: " << seed << "\n"
       << "# reproduce: RC_PARAMS=\"reproduce=" << reproduce << "\" " << binary
       << " --gtest_filter=" << property << "\n"
       << "# failure:\n"
       << CommentLines(message, 12) << body;
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text.str();
    if (!f) {
      log << "regression trace: could not write " << path << "\n";
      return "";
    }
  }
  // The running test's TargetScope (if any) is active: this runs on `target`.
  std::ostringstream out, err;
  const int status = trace::RunTraceFile(path, trace::RunOptions(), out, err);
  log << "regression trace written: " << path << "\n"
      << "replay it: " << KvspecCommand() << " trace " << target_flag << path << "\n"
      << "keep it (with the fix): cp " << path << " " << SourceRegressionDir() << "/\n";
  if (status == 0) {
    log << "note: this build runs it with exit 0, so the trace does not show this failure\n"
        << "(the property checked something a trace cannot state, e.g. bit-exact outputs\n"
        << "or grouped query heads); keep it or delete it by hand\n";
  } else {
    log << "this build runs it with exit " << status << ":\n" << err.str();
  }
  return path;
}

bool Check(const std::string& id, const std::string& target,
           const std::function<void()>& property) {
  rc::detail::TestMetadata metadata;
  metadata.id = id;
  metadata.description = id;
  Recorder& rec = Recorder::Get();
  rec.ResetProperty();
  auto wrapped = [&property, &rec] {
    rec.ResetCase();  // a case that fails before Begin() records nothing
    try {
      property();
    } catch (const rc::detail::CaseResult& r) {
      if (r.type == rc::detail::CaseResult::Type::Failure) rec.CaseFailed();
      throw;
    } catch (const rc::GenerationFailure&) {
      throw;  // a discard
    } catch (...) {
      rec.CaseFailed();
      throw;
    }
  };
  const rc::detail::TestResult result = rc::detail::checkTestable(wrapped, metadata);
  std::ostringstream ss;
  rc::detail::printResultMessage(result, ss);
  if (result.is<rc::detail::SuccessResult>()) {
    if (!result.get<rc::detail::SuccessResult>().distribution.empty()) {
      std::cout << "- " << id << "\n" << ss.str() << std::endl;
    }
    rec.ResetProperty();
    return true;
  }
  if (result.is<rc::detail::FailureResult>()) {
    const rc::detail::FailureResult& failure = result.get<rc::detail::FailureResult>();
    std::unordered_map<std::string, rc::detail::Reproduce> map;
    map[metadata.id] = failure.reproduce;
    const std::string reproduce = rc::detail::reproduceMapToString(map);
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string test =
        info ? std::string(info->test_suite_name()) + "." + info->name() : id;
    std::ostringstream log;
    WriteRegression(test, SelfPath(), target, rc::detail::configuration().testParams.seed,
                    reproduce, failure.description, log);
    ss << "\n" << log.str();
  }
  rec.ResetProperty();
  ADD_FAILURE() << ss.str() << std::endl;
  return false;
}

void CheckAndRecord(const std::string& target, const std::function<void()>& property) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string id = info ? std::string(info->test_suite_name()) + "/" + info->name() : "";
  Check(id, target, property);
}

}  // namespace kvspec::regress
