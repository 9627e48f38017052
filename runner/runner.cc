// The runner (runner/runner.h): setup, the dispatch of statements, the
// operations on one layout's tokens (trim, arm, accept) and the public
// entry points. The other jobs are in the files runner_internal.h lists.
#include "kvspec/runner/runner.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "kvspec/kernels/conv1d.h"
#include "kvspec/runner/runner_internal.h"
#include "kvspec/trace/values.h"

namespace kvspec::trace {
namespace runner_internal {

Runner::Runner(const Program& program, const RunOptions& options, std::ostream& out,
               std::ostream& err)
    : p_(program), opt_(options), out_(out), err_(err) {
  for (const Statement& st : p_.body) {
    // `expect error OP` may wrap an expectation too.
    for (const Statement* s = &st; s; s = s->op() == Op::kExpectError
                                              ? std::get<ExpectError>(s->operation).inner.get()
                                              : nullptr) {
      if (s->op() == Op::kExpectSees) keep_sees_ = true;
      if (s->op() == Op::kExpectOut) keep_outs_ = true;
    }
  }
  if (opt_.emit) {
    // Expectations the run regenerates are dropped from the echo.
    for (const Statement& st : p_.body) {
      if (st.op() == Op::kExpectSees || st.op() == Op::kExpectPositions ||
          (opt_.values && st.op() == Op::kExpectOut)) {
        drop_lines_.insert(st.line);
      }
    }
  }
}

int Runner::Run() {
  int budget_line = p_.header_end_line;
  if (Outcome o = CreateBudget(&budget_line); o.code) {
    err_ << p_.file << ":" << budget_line << ": limit: " << o.message << "\n";
    status_ = 2;
    return Finish(budget_line);
  }
  std::unique_ptr<Layout> layout;
  Status s = Layout::Create(p_.rows, p_.layers, &layout);
  if (!s.ok()) {
    int line = p_.header_end_line;
    for (size_t l = 0; l < p_.layers.size(); ++l) {
      if (s.message().find("'" + p_.layers[l].name + "'") != std::string::npos) {
        line = p_.layer_lines[l];
      }
    }
    Refusal(line, s.message());
    return Finish(line);
  }
  layout->set_reference_kernels(opt_.reference_kernels);
  layouts_["main"].layout = std::move(layout);
  current_ = "main";
  conv_weights_.resize(p_.layers.size());
  packed_conv_weights_.resize(p_.layers.size());
  for (size_t l = 0; l < p_.layers.size(); ++l) {
    const LayerConfig& d = p_.layers[l];
    if (d.kind == CacheKind::kSsm) {
      const size_t C = d.SsmChannels(), K = static_cast<size_t>(d.conv);
      conv_weights_[l] = ConvWeights(static_cast<int>(l), C, K);
      packed_conv_weights_[l].resize(K * C);
      PackConvWeights(conv_weights_[l].data(), packed_conv_weights_[l].data(), C, K);
    }
  }
  for (const Statement& st : p_.body) {
    Outcome o = Execute(st);
#ifndef NDEBUG
    if (Status broken = CheckInvariants(); !broken.ok()) {
      std::fprintf(stderr, "kvspec: runner invariant broken after line %d: %s\n", st.line,
                   broken.message().c_str());
      std::abort();
    }
#endif
    if (o.code == 2) {
      err_ << p_.file << ":" << st.line << ": limit: " << o.message << "\n";
      status_ = 2;
      return Finish(st.line);
    }
    if (o.code == 1) {
      Refusal(st.line, o.message);
      return Finish(st.line);
    }
  }
  return Finish(static_cast<int>(p_.lines.size()));
}

Status Runner::CheckInvariants() const {
  const auto current = layouts_.find(current_);
  if (current == layouts_.end()) {
    return Status::Error("no layout named '" + current_ + "' (the current one)");
  }
  for (const auto& [name, named] : layouts_) {
    if (!named.layout) return Status::Error("layout '" + name + "' is null");
    if (named.layout->size() != p_.layers.size()) {
      return Status::Error("layout '" + name + "' has " +
                           std::to_string(named.layout->size()) + " layers");
    }
    if (named.layout->rows() < 1 || named.layout->rows() > kMaxRows) {
      return Status::Error("layout '" + name + "' has " +
                           std::to_string(named.layout->rows()) + " rows");
    }
  }
  if (conv_weights_.size() != p_.layers.size()) {
    return Status::Error("conv weights for " + std::to_string(conv_weights_.size()) +
                         " of " + std::to_string(p_.layers.size()) + " layers");
  }
  for (size_t l = 0; l < p_.layers.size(); ++l) {
    const LayerConfig& d = p_.layers[l];
    const size_t want = d.kind == CacheKind::kSsm
                            ? d.SsmChannels() * static_cast<size_t>(d.conv)
                            : 0;
    if (conv_weights_[l].size() != want) {
      return Status::Error("layer '" + d.name + "' has " +
                           std::to_string(conv_weights_[l].size()) + " conv weights");
    }
    if (packed_conv_weights_.size() != p_.layers.size()) {
      return Status::Error("packed conv weights for " +
                           std::to_string(packed_conv_weights_.size()) + " layers");
    }
    if (want > 0) {
      std::vector<float> packed(want);
      PackConvWeights(conv_weights_[l].data(), packed.data(), d.SsmChannels(),
                      static_cast<size_t>(d.conv));
      if (packed != packed_conv_weights_[l]) {
        return Status::Error("layer '" + d.name + "': packed conv weights differ from its weights");
      }
    } else if (!packed_conv_weights_[l].empty()) {
      return Status::Error("layer '" + d.name + "' has packed conv weights");
    }
  }
  if (status_ < 0 || status_ > 2) {
    return Status::Error("exit status " + std::to_string(status_));
  }
  if (!top_level_) return Status::Error("between statements inside `expect error`");
  // The index's own check walks every token: too slow for every statement.
  return Status::Ok();
}

Outcome Runner::Execute(const Statement& st) {
  switch (st.op()) {
    case Op::kWindow:
      return Forward(st, st.Get<WindowOp>(), false);
    case Op::kDecode:
      return Forward(st, st.Get<DecodeOp>().AsWindow(), true);
    case Op::kTrim:
      return Trim(st, st.Get<TrimOp>());
    case Op::kArm:
      return Arm();
    case Op::kAccept:
      return Accept(st, st.Get<AcceptOp>());
    case Op::kFork:
      return Fork(st.Get<ForkOp>());
    case Op::kUse:
      return Use(st.Get<UseOp>());
    case Op::kJoin:
      return Join(st.Get<JoinOp>());
    case Op::kFilter:
      return Filter(st.Get<FilterOp>());
    case Op::kExtract:
      return Extract(st.Get<ExtractOp>());
    case Op::kReload:
      return Reload(st);
    case Op::kExpectSees:
      return CheckSees(st, st.Get<ExpectSees>());
    case Op::kExpectOut:
      return CheckOut(st, st.Get<ExpectOut>());
    case Op::kExpectPositions:
      return CheckPositions(st, st.Get<ExpectPositions>());
    case Op::kExpectError:
      return CheckError(st, st.Get<ExpectError>());
    case Op::kExpectEqual:
      return CheckEqual(st, st.Get<ExpectEqual>());
    case Op::kExpectTrimmable:
      return CheckTrimmable(st, st.Get<ExpectTrimmable>());
    case Op::kExpectKind:
      return CheckKind(st, st.Get<ExpectKind>());
    case Op::kExpectBytesPerToken:
      return CheckBytesPerToken(st, st.Get<ExpectBytesPerToken>());
  }
  return Outcome::Refused("unknown statement");
}

Outcome Runner::Trim(const Statement& st, const TrimOp& trim) {
  Status s = Cur().Trim(trim.count, trim.bypass);
  if (!s.ok()) return Outcome::Refused(s.message());
  EmitPositions(st);
  return {};
}

Outcome Runner::Arm() {
  Status s = Cur().Arm();
  if (!s.ok()) return Outcome::Refused(s.message());
  return {};
}

Outcome Runner::Accept(const Statement& st, const AcceptOp& accept) {
  Status s = Cur().Accept(accept.keep);
  if (!s.ok()) return Outcome::Refused(s.message());
  PrintStates();
  EmitPositions(st);
  return {};
}

}  // namespace runner_internal

int RunProgram(const Program& program, const RunOptions& options, std::ostream& out,
               std::ostream& err) {
  runner_internal::Runner runner(program, options, out, err);
  return runner.Run();
}

int RunTraceText(std::string_view text, std::string_view name, const RunOptions& options,
                 std::ostream& out, std::ostream& err) {
  Program program;
  SyntaxError error;
  if (!ParseTrace(text, name, &program, &error)) {
    err << error.ToString() << "\n";
    return 2;
  }
  RunOptions effective = options;
  for (const Statement& st : program.body) {
    if (st.op() == Op::kExpectOut) effective.values = true;
  }
  return RunProgram(program, effective, out, err);
}

int ReadTraceSource(const std::string& path, std::string* text, std::ostream& err) {
  const std::string_view name = TraceSourceName(path);
  text->clear();
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      err << name << ":1:1: a directory, not a trace file\n";
      return 2;
    }
    file.open(path, std::ios::binary);
    if (!file) {
      err << name << ":1:1: cannot open file\n";
      return 2;
    }
    in = &file;
  }
  // A chunk at a time, never more than the cap and one chunk held, however
  // long the input (standard input may not end).
  char buf[1 << 16];
  while (in->read(buf, sizeof(buf)) || in->gcount() > 0) {
    text->append(buf, static_cast<size_t>(in->gcount()));
    if (text->size() > kMaxTraceBytes) {
      err << name << ":1:1: file larger than " << (kMaxTraceBytes >> 20) << " MiB\n";
      std::string().swap(*text);
      return 2;
    }
  }
  if (in->bad()) {
    err << name << ":1:1: cannot read file\n";
    std::string().swap(*text);
    return 2;
  }
  return 0;
}

int RunTraceFile(const std::string& path, const RunOptions& options, std::ostream& out,
                 std::ostream& err) {
  std::string text;
  if (const int status = ReadTraceSource(path, &text, err)) return status;
  return RunTraceText(text, TraceSourceName(path), options, out, err);
}

}  // namespace kvspec::trace
