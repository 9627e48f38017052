// A parsed trace as JSON: the form corpus/emitted/ ships so that a runner
// without kvspec's C++ (python/kvspec/conform.py in pure-Python mode) can
// read a trace that kvspec's own parser has already checked.
//
// Shape (one object; every statement names its op and line):
//   {"format": "kvspec-trace-json", "version": 1, "file": F, "rows": B,
//    "header_end_line": N,
//    "layers": [{"name", "kind", "line", "heads", "qheads", "dim",
//                "window", "capacity", "kheads", "dk", "dv", "conv"}],
//    "statements": [{"line": N, "op": "window", ...fields}]}
// Ops and fields: window {columns, left, right, ids} (null when not
// given); decode {ids}; trim {count, bypass}; arm; accept {keep};
// fork/use/join {name}; filter {rows}; extract {row, name}; reload;
// "expect sees" {layer, row, pos, items: [[pos, id]...]};
// "expect out" {layer, row, pos, values}; "expect positions" {positions};
// "expect error" {inner: a statement}; "expect equal" {name};
// "expect trimmable" {layer, yes}; "expect kind" {layer, kind};
// "expect bytes_per_token" {layer, bytes}. LAYER fields are layer names.
// Values are printed with 17 significant digits: they read back exactly.
// With source lines (an emitted trace's lines mapped back to the file it
// was emitted from), every statement also has "source_line": the line of
// the original file, or for an expectation the emitter filled in, the line
// of the statement it follows.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kvspec/trace/program.h"

namespace kvspec::trace {

// The op's name as the JSON (and the trace text) spells it: "window",
// "expect sees", ...
std::string_view OpName(Op op);

// The whole program as one JSON document (ends with a newline).
// source_lines, when given, has one entry per line of the program's text.
std::string ProgramToJson(const Program& program,
                          const std::vector<int>* source_lines = nullptr);

// Maps each line of `emitted` (kvspec trace --emit of `original`) to the
// line of `original` it echoes, or to the last echoed line before it for a
// line the emitter added (0 before the first). The emitter echoes the
// original lines in order, dropping the expectations it regenerates.
std::vector<int> SourceLines(std::string_view original, std::string_view emitted);

}  // namespace kvspec::trace
