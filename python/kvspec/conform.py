"""The conformance runner: drives any engine's cache through kvspec traces.

    python3 -m kvspec.conform --adapter MODULE[:CLASS] [--json] FILE...

``MODULE`` alone means ``MODULE:Adapter`` (kvspec.adapter explains the
protocol). FILE is a trace (``.trace``, parsed by kvspec's own parser; needs
the compiled module) or its emitted form (``.json``, corpus/emitted/).

For every statement the runner checks the trace's own expectations. When
the compiled module is present it also runs kvspec's core on the same trace
(kvspec.adapters.reference) in lockstep and compares every observable after
every statement: refused or not, what each query saw (and the outputs, when
the adapter gives them), positions, and per layer the kind, trimmability and
bytes per token; the first divergence is reported with the trace line,
expected (the reference) and got (the adapter). Without the module it checks
the traces' own expectations alone and says so.

Output: one line per trace (``pass FILE``, ``fail FILE:LINE: ...`` or
``not applicable FILE: reason``), then ``N passed, N failed, N not
applicable``. ``--json`` prints the same as one JSON document. Exit status
0 when nothing failed, 1 otherwise, 2 for bad usage.
"""

import argparse
import importlib
import json
import sys
import time

from . import program as programs
from .adapter import Adapter, ForwardResult  # noqa: F401
from .errors import NotApplicable, Refused, TraceSyntaxError

MAX_ROWS = 64
OUT_TOLERANCE = 1e-4


class Failure(Exception):
    """A failed check: the trace line and what was expected and got."""

    def __init__(self, line, message, reference_refused=False):
        super().__init__(message)
        self.line = line
        self.message = message
        # The reference refused the statement the adapter accepted.
        self.reference_refused = reference_refused


class Result:
    """The outcome of one trace: status "pass", "fail" or "not applicable"."""

    def __init__(self, file, status, line=None, message=""):
        self.file = file
        self.path = file  # the file given to the runner (.trace or .json)
        self.status = status
        self.line = line
        self.message = message
        # expectations not compared because the adapter declares them
        # unobserved (Adapter.unobserved): statement -> count
        self.unchecked = {}

    def text(self):
        if self.status == "pass":
            if self.unchecked:
                return "pass %s (not compared: %s)" % (self.file, ", ".join(
                    "%d %s" % (n, op) for op, n in sorted(self.unchecked.items())))
            return "pass %s" % self.file
        if self.status == "fail":
            where = self.file if self.line is None else "%s:%d" % (self.file, self.line)
            return "fail %s: %s" % (where, self.message)
        return "not applicable %s: %s" % (self.file, self.message)

    def as_dict(self):
        d = {"file": self.file, "path": self.path, "status": self.status, "line": self.line,
             "message": self.message}
        if self.unchecked:
            d["unchecked"] = dict(self.unchecked)
        return d


def load_adapter(spec):
    """An adapter instance from ``MODULE[:CLASS]`` (an instance or class is
    also accepted as is)."""
    if not isinstance(spec, str):
        return spec() if isinstance(spec, type) else spec
    module_name, _, class_name = spec.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, class_name or "Adapter")()


def have_core():
    """Whether the compiled module kvspec._core is importable."""
    from . import HAVE_CORE
    return HAVE_CORE


def _norm_item(item):
    if isinstance(item, str):
        return item
    pos, ident = item
    return (int(pos), int(ident))


def _sorted_items(items):
    return sorted((_norm_item(i) for i in items),
                  key=lambda i: (1, i, 0) if isinstance(i, str) else (0, "", i))


def _items_text(items):
    return programs.format_items(_sorted_items(items))


class _Side:
    """One engine's view of a trace: its adapter, named handles, the last
    forward of each."""

    def __init__(self, adapter):
        self.adapter = adapter
        self.handles = {}
        self.last = {}  # name -> ForwardResult or None

    def call(self, method, *args):
        return getattr(self.adapter, method)(*args)


class _Run:
    def __init__(self, prog, adapter, reference, lenient=False):
        self.p = prog
        # lenient: an operation the reference refuses and the engine accepts
        # is undone on the engine's side (from a fork taken before it),
        # counted as a "missing refusal" and the trace goes on, so that the
        # rest of a trace is still compared for an engine that does not
        # refuse what kvspec refuses (docs/engines/llama.cpp.md).
        self.lenient = lenient and reference is not None
        self.sides = [_Side(adapter)] + ([_Side(reference)] if reference is not None else [])
        self.current = "main"
        self.layer_names = [layer.name for layer in prog.layers]
        self.unobserved = frozenset(getattr(adapter, "unobserved", ()))
        self.unchecked = {}

    def not_compared(self, op):
        self.unchecked[op] = self.unchecked.get(op, 0) + 1

    # -- helpers ---------------------------------------------------------------
    @property
    def engine(self):
        return self.sides[0]

    def rows(self):
        return len(self.engine.call("positions", self.engine.handles[self.current]))

    def apply(self, side, method, *args, name=None):
        """Calls a mutating adapter method on the current (or named) handle;
        a returned handle replaces it."""
        name = name or self.current
        h = side.call(method, side.handles[name], *args)
        if h is not None:
            side.handles[name] = h

    def both(self, st, fn):
        """Runs fn(side) on every side; returns the engine's refusal message
        (None when it was accepted). A disagreement with the reference about
        refusing is a divergence."""
        outcomes = []
        if self.lenient:
            eng = self.engine
            saved = (dict(eng.handles), dict(eng.last),
                     eng.call("fork", eng.handles[self.current]))
        for side in self.sides:
            try:
                fn(side)
                outcomes.append(None)
            except Refused as e:
                outcomes.append(str(e) or "refused")
        if self.lenient and outcomes[0] is None and outcomes[1] is not None:
            handles, last, snapshot = saved
            handles[self.current] = snapshot
            eng.handles.clear()
            eng.handles.update(handles)
            eng.last.clear()
            eng.last.update(last)
            self.not_compared("missing refusal")
            return outcomes[1]
        if len(outcomes) == 2 and (outcomes[0] is None) != (outcomes[1] is None):
            if outcomes[1] is None:
                raise Failure(st.line, "differs from the reference: expected the operation "
                              "to be accepted got refused (%s)" % outcomes[0])
            raise Failure(st.line, "differs from the reference: expected a refusal (%s) got "
                          "none" % outcomes[1], reference_refused=True)
        return outcomes[0]

    # -- the trace -------------------------------------------------------------
    def run(self):
        for side in self.sides:
            try:
                side.handles["main"] = side.call("create", self.p.rows, self.p.layers)
            except Refused as e:
                raise Failure(self.p.header_end_line, "error: create refused: %s" % e)
            side.last["main"] = None
        self.compare_state(self.p.header_end_line)
        for st in self.p.statements:
            refusal = self.execute(st)
            if refusal is not None:
                raise Failure(st.line, "error: %s" % refusal)
            if not st.op.startswith("expect"):
                self.compare_state(st.line)

    def execute(self, st):
        """Runs one statement; returns a refusal message or None."""
        op = st.op
        if op in ("window", "decode"):
            return self.forward(st)
        if op == "trim":
            return self.both(st, lambda s: self.apply(s, "trim", st.count, st.bypass))
        if op == "arm":
            return self.both(st, lambda s: self.apply(s, "arm"))
        if op == "accept":
            rows = self.rows()
            keep = st.keep * rows if len(st.keep) == 1 else st.keep
            if len(keep) != rows:
                return "accept lists %d values for %d rows" % (len(st.keep), rows)
            return self.both(st, lambda s: self.apply(s, "accept", list(keep)))
        if op == "fork":
            if st.name in self.engine.handles:
                return "fork: a layout named '%s' exists" % st.name
            for s in self.sides:
                s.handles[st.name] = s.call("fork", s.handles[self.current])
                s.last[st.name] = s.last[self.current]
            return None
        if op == "use":
            if st.name not in self.engine.handles:
                return "use: no layout named '%s'" % st.name
            self.current = st.name
            return None
        if op == "join":
            if st.name not in self.engine.handles:
                return "join: no layout named '%s'" % st.name
            if st.name == self.current:
                return "join: a layout cannot join itself"
            other_rows = len(self.engine.call("positions", self.engine.handles[st.name]))
            if self.rows() + other_rows > MAX_ROWS:
                return "join: %d rows exceed the limit of %d" % (self.rows() + other_rows, MAX_ROWS)

            def join(s):
                self.apply(s, "join", s.handles[st.name])
                s.last[self.current] = None
            return self.both(st, join)
        if op == "filter":
            rows = self.rows()
            if not st.rows or any(b <= a for a, b in zip(st.rows, st.rows[1:])) or \
                    st.rows[-1] >= rows:
                return "filter: rows must be a non-empty ascending list of existing rows"

            def filt(s):
                self.apply(s, "filter", list(st.rows))
                s.last[self.current] = None
            return self.both(st, filt)
        if op == "extract":
            if st.name in self.engine.handles:
                return "extract: a layout named '%s' exists" % st.name
            if st.row >= self.rows():
                return "extract: row %d out of range" % st.row

            def extract(s):
                h = s.call("extract", s.handles[self.current], st.row)
                s.handles[st.name] = h
                s.last[st.name] = None
            return self.both(st, extract)
        if op == "reload":
            return self.both(st, lambda s: self.apply(s, "reload"))
        if op == "expect error":
            return self.expect_error(st)
        self.expect(st)
        return None

    def forward(self, st):
        rows = self.rows()
        decode = st.op == "decode"
        columns = 1 if decode else st.columns
        left = [0] * rows if decode or st.left is None else list(st.left)
        right = [0] * rows if decode or st.right is None else list(st.right)
        if len(left) != rows:
            return "left= has %d values for %d rows" % (len(left), rows)
        if len(right) != rows:
            return "right= has %d values for %d rows" % (len(right), rows)
        real = [columns - a - b for a, b in zip(left, right)]
        if any(n < 0 for n in real):
            return "left + right exceed L"
        before = self.engine.call("positions", self.engine.handles[self.current])
        if st.ids is None:
            ids = [list(range(b, b + n)) for b, n in zip(before, real)]
        else:
            if len(st.ids) != rows:
                return "ids= has %d groups for %d rows" % (len(st.ids), rows)
            for r, (g, n) in enumerate(zip(st.ids, real)):
                if len(g) != n:
                    return "ids= gives row %d %d ids for %d real tokens" % (r, len(g), n)
            ids = [list(g) for g in st.ids]
        positions = [list(range(b, b + n)) for b, n in zip(before, real)]

        def fwd(s):
            h = s.handles[self.current]
            result = s.adapter.forward(h, columns, ids, positions, left, right, decode)
            s.last[self.current] = result
        refusal = self.both(st, fwd)
        if refusal is None and len(self.sides) == 2:
            self.compare_forward(st)
        return refusal

    # -- comparisons with the reference -----------------------------------------
    def compare_forward(self, st):
        got = self.engine.last[self.current]
        want = self.sides[1].last[self.current]
        for key in sorted(want.seen):
            layer, row, pos = key
            what = "sees %s r%d p%d:" % (self.layer_names[layer], row, pos)
            if key not in got.seen:
                raise Failure(st.line, "differs from the reference: %s expected %s got no such "
                              "query" % (what, _items_text(want.seen[key])))
            if _sorted_items(got.seen[key]) != _sorted_items(want.seen[key]):
                raise Failure(st.line, "differs from the reference: %s expected %s got %s" % (
                    what, _items_text(want.seen[key]), _items_text(got.seen[key])))
        extra = set(got.seen) - set(want.seen)
        if extra:
            layer, row, pos = sorted(extra)[0]
            raise Failure(st.line, "differs from the reference: sees %s r%d p%d: expected no "
                          "such query" % (self.layer_names[layer], row, pos))
        if got.out is not None and want.out is not None:
            for key in sorted(want.out):
                if key not in got.out:
                    continue  # an adapter may give outputs of some layers only
                self.check_values(st, key, want.out[key], got.out[key], "differs from the "
                                  "reference: ")

    def check_values(self, st, key, want, got, prefix=""):
        layer, row, pos = key
        ok = len(want) == len(got) and all(
            abs(float(g) - float(w)) <= OUT_TOLERANCE * (1 + abs(float(w)))
            for w, g in zip(want, got))
        if not ok:
            raise Failure(st.line, "%sout %s r%d p%d: expected %s got %s" % (
                prefix, self.layer_names[layer], row, pos,
                " ".join("%.9g" % v for v in want), " ".join("%.9g" % v for v in got)))

    def observe(self, side, name):
        h = side.handles[name]
        a = side.adapter
        obs = {"positions": list(a.positions(h))}
        for i in range(len(self.p.layers)):
            n = self.layer_names[i]
            if "kind" not in self.unobserved:
                obs["kind " + n] = a.kind(h, i)
            if "trimmable" not in self.unobserved:
                obs["trimmable " + n] = "yes" if a.trimmable(h, i) else "no"
            if "bytes_per_token" not in self.unobserved:
                obs["bytes_per_token " + n] = int(a.bytes_per_token(h, i))
        return obs

    def compare_state(self, line):
        if len(self.sides) < 2:
            return
        for name in sorted(self.sides[1].handles):
            want = self.observe(self.sides[1], name)
            got = self.observe(self.engine, name)
            for key in want:
                if want[key] != got[key]:
                    where = "" if name == self.current else " (layout %s)" % name
                    raise Failure(line, "differs from the reference%s: %s expected %s got %s" % (
                        where, key, want[key], got[key]))

    # -- expectations -------------------------------------------------------------
    def expect_error(self, st):
        inner = st.inner
        snapshots = []
        for s in self.sides:
            snapshots.append(s.call("fork", s.handles[self.current]))
        names_before = (self.current, sorted(self.engine.handles))
        try:
            refusal = self.execute(inner)
        except Failure:
            raise
        if refusal is None:
            raise Failure(st.line, "expected an error got none")
        if (self.current, sorted(self.engine.handles)) != names_before:
            raise Failure(st.line, "expected the layout unchanged after the refusal (%s) got a "
                          "change" % refusal)
        for s, snap in zip(self.sides, snapshots):
            diff = s.call("difference", snap, s.handles[self.current])
            if diff:
                who = "" if s is self.engine else " (in the reference)"
                raise Failure(st.line, "expected the layout unchanged after the refusal (%s) got "
                              "a change%s: %s" % (refusal, who, diff))
        return None

    def expect(self, st):
        op = st.op
        eng = self.engine
        h = eng.handles[self.current]
        if op == "expect sees" or op == "expect out":
            layer = self.layer_names.index(st.layer)
            key = (layer, st.row, st.pos)
            last = eng.last[self.current]
            what = "%s %s r%d p%d:" % (op[7:], st.layer, st.row, st.pos)
            if op == "expect sees":
                want = _items_text(st.items)
                if last is None or key not in last.seen:
                    raise Failure(st.line, "expected %s %s got no such query in the last "
                                  "forward" % (what, want))
                got = _items_text(last.seen[key])
                if got != want:
                    raise Failure(st.line, "expected %s %s got %s" % (what, want, got))
                return
            if "out" in self.unobserved:
                self.not_compared(op)
                return
            if last is not None and last.out is None:
                raise NotApplicable("the adapter computes no outputs (expect out, line %d)"
                                    % st.line)
            if last is None or key not in last.out:
                raise Failure(st.line, "expected %s %s got no such query in the last forward" % (
                    what, " ".join("%.9g" % v for v in st.values)))
            self.check_values(st, key, st.values, list(last.out[key]))
            return
        if op == "expect positions":
            got = list(eng.call("positions", h))
            if len(got) != len(st.positions):
                raise Failure(st.line, "error: expect positions lists %d values for %d rows" % (
                    len(st.positions), len(got)))
            if got != list(st.positions):
                raise Failure(st.line, "expected positions %s got %s" % (
                    ",".join(map(str, st.positions)), ",".join(map(str, got))))
            return
        if op == "expect equal":
            if st.name not in eng.handles:
                raise Failure(st.line, "error: expect equal: no layout named '%s'" % st.name)
            verdicts = [s.call("difference", s.handles[self.current], s.handles[st.name])
                        for s in self.sides]
            if verdicts[0]:
                raise Failure(st.line, "expected equal %s got %s" % (st.name, verdicts[0]))
            if len(verdicts) == 2 and verdicts[1]:
                raise Failure(st.line, "differs from the reference: expected a difference (%s) "
                              "got equal" % verdicts[1])
            return
        layer = self.layer_names.index(st.layer)
        if op[len("expect "):] in self.unobserved:
            self.not_compared(op)
            return
        if op == "expect trimmable":
            got = bool(eng.call("trimmable", h, layer))
            if got != st.yes:
                raise Failure(st.line, "expected trimmable %s %s got %s" % (
                    st.layer, "yes" if st.yes else "no", "yes" if got else "no"))
        elif op == "expect kind":
            got = eng.call("kind", h, layer)
            if got != st.kind:
                raise Failure(st.line, "expected kind %s %s got %s" % (st.layer, st.kind, got))
        elif op == "expect bytes_per_token":
            got = int(eng.call("bytes_per_token", h, layer))
            if got != st.bytes:
                raise Failure(st.line, "expected bytes_per_token %s %d got %d" % (
                    st.layer, st.bytes, got))
        else:
            raise Failure(st.line, "unknown statement %s" % op)


def run_program(prog, adapter, reference=None, lenient=False):
    """Runs one parsed program; returns a :class:`Result`."""
    adapter = load_adapter(adapter)
    run = _Run(prog, adapter, reference, lenient)
    try:
        run.run()
    except NotApplicable as e:
        return Result(prog.file, "not applicable", message=e.reason)
    except Failure as e:
        return Result(prog.file, "fail", e.line, e.message)
    result = Result(prog.file, "pass")
    result.unchecked = run.unchecked
    return result


def run_file(path, adapter, compare=True, lenient=False):
    """Runs one file (.trace or .json); returns a :class:`Result`."""
    try:
        prog = programs.load(path)
    except (TraceSyntaxError, ValueError, OSError) as e:
        return Result(path, "fail", message=str(e))
    # A .json file reports the trace it was emitted from, with that trace's
    # lines; a .trace file reports itself.
    if not path.endswith(".json"):
        prog.file = path
    reference = None
    if compare and have_core():
        from .adapters.reference import Adapter as Reference
        reference = Reference()
    adapter = load_adapter(adapter)
    try:
        result = run_program(prog, adapter, reference, lenient)
    except Exception as e:  # an adapter bug is a failure of that trace, not a crash
        result = Result(prog.file, "fail", message="%s: %s" % (type(e).__name__, e))
    result.path = path
    return result


def summary(results):
    counts = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "not applicable")}
    return "%d passed, %d failed, %d not applicable" % (
        counts["pass"], counts["fail"], counts["not applicable"])


def run(adapter, files, compare=True, as_json=False, out=None, lenient=False):
    """Runs every file with the adapter (a ``MODULE[:CLASS]`` string, a class
    or an instance); prints the report to ``out`` (default stdout) and
    returns the list of :class:`Result`."""
    out = out or sys.stdout
    results = []
    if compare and have_core():
        mode = "compared with kvspec's core"
    elif compare:
        mode = "pure Python: the traces' own expectations only (kvspec._core not available)"
    else:
        mode = "the traces' own expectations only (--no-compare)"
    start = time.monotonic()
    for path in files:
        result = run_file(path, adapter, compare, lenient)
        results.append(result)
        if not as_json:
            print(result.text(), file=out)
    if as_json:
        json.dump({"mode": mode, "results": [r.as_dict() for r in results],
                   "passed": sum(r.status == "pass" for r in results),
                   "failed": sum(r.status == "fail" for r in results),
                   "not_applicable": sum(r.status == "not applicable" for r in results),
                   "seconds": round(time.monotonic() - start, 3)}, out, indent=1)
        print(file=out)
    else:
        print("# mode: %s" % mode, file=out)
        print(summary(results), file=out)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python3 -m kvspec.conform",
        description="Runs kvspec traces against an engine's cache through an adapter.")
    parser.add_argument("--adapter", required=True,
                        help="MODULE[:CLASS] of the adapter (MODULE alone: MODULE:Adapter)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-compare", action="store_true",
                        help="check the traces' own expectations only, even with the module")
    parser.add_argument("files", nargs="*", help=".trace or emitted .json files")
    parser.add_argument("--random", type=int, metavar="N",
                        help="run N random programs (kvspec.hypothesis) instead of files")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--lenient-refusals", action="store_true",
                        help="undo and count an operation the reference refuses and the "
                        "engine accepts, and go on (needs the module)")
    parser.add_argument("--kinds", default="kv,rotating",
                        help="random mode: the layer kinds drawn, from kv, rotating, ssm and "
                        "kv-full (a kv layer without a window)")
    parser.add_argument("--keep-going", action="store_true",
                        help="random mode: a failure does not end the run; it is shrunk, "
                        "stored in --out and classified, later failures of the same class "
                        "are counted; the summary gives failures per class")
    parser.add_argument("--out", metavar="DIR",
                        help="random mode: where shrunk failing traces are written (default: "
                        "the working directory; with --keep-going ./kvspec-random-SEED)")
    parser.add_argument("--progress", type=float, default=60, metavar="SECONDS",
                        help="random mode: a progress line at least this often (0: none)")
    parser.add_argument("--time-budget", type=float, metavar="SECONDS",
                        help="random mode with --keep-going: start no new segment of examples "
                        "after this many seconds (the summary says the run was stopped)")
    parser.add_argument("--shrink-seconds", type=float, metavar="SECONDS",
                        help="random mode with --keep-going: stop shrinking a failure after "
                        "this many seconds and keep the smallest program found so far")
    args = parser.parse_args(argv)
    if args.random is not None:
        from . import hypothesis as hyp
        kinds = args.kinds.split(",")
        bad = [k for k in kinds if k not in ("kv", "rotating", "ssm", "kv-full")]
        if bad:
            parser.error("--kinds: unknown kind %s" % ", ".join(bad))
        failed = hyp.run_random(args.adapter, args.random, args.seed, args.max_steps,
                                failure_dir=args.out, lenient=args.lenient_refusals,
                                kinds=kinds, keep_going=args.keep_going,
                                progress=args.progress, time_budget=args.time_budget,
                                shrink_seconds=args.shrink_seconds)
        return 1 if failed else 0
    if not args.files:
        parser.error("no trace files given")
    results = run(args.adapter, args.files, compare=not args.no_compare, as_json=args.json,
                  lenient=args.lenient_refusals)
    return 1 if any(r.status == "fail" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
