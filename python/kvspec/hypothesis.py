"""Property-based differential testing of any adapter (needs kvspec._core).

:func:`machine` builds a Hypothesis ``RuleBasedStateMachine`` whose rules
are trace statements (window, decode, trim, arm, accept, fork, use, join,
filter, extract, reload, expect equal), with arguments drawn from the
current state. It drives an adapter in lockstep with kvspec's core (the
model, kvspec.adapters.reference) through the runner's own machinery, so
every observable is compared after every step exactly as
``kvspec.conform`` does for trace files. An operation both sides refuse is
fine (it is recorded as ``expect error OP`` and must change nothing).

A failure shrinks to a minimal program, which is printed as a trace file
that reproduces it with ``python3 -m kvspec.conform --adapter ... FILE``;
Hypothesis keeps it in its example database (``.hypothesis/`` in the
working directory by default), so it is replayed first next time.

From the command line::

    python3 -m kvspec.conform --adapter MODULE[:CLASS] --random N [--seed S] [--max-steps K]

From pytest::

    from kvspec.hypothesis import machine
    TestMyEngine = machine("my_engine:Adapter").TestCase
"""

import os
import sys
import time

import hypothesis.strategies as st
from hypothesis import HealthCheck, assume, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, \
    run_state_machine_as_test

from . import conform
from .errors import NotApplicable
from .program import Program, Statement

NAMES = ["b", "c", "d"]


def _layer(kind, i, draw):
    name = "l%d" % i
    full = kind == "kv-full"  # a kv layer without a window
    if full:
        kind = "kv"
    d = {"name": name, "kind": kind, "line": 0, "heads": 1, "qheads": 1, "dim": 4,
         "window": 0, "capacity": 0, "kheads": 1, "dk": 4, "dv": 4, "conv": 4}
    if kind == "kv" and not full:
        d["window"] = draw(st.sampled_from([0, 0, 1, 2, 3]))
    elif kind == "rotating":
        d["window"] = draw(st.integers(1, 4))
        d["capacity"] = d["window"] + draw(st.integers(0, 2))
    else:
        d["conv"] = draw(st.integers(1, 4))
    return d


@st.composite
def headers(draw, kinds=("kv", "rotating")):
    rows = draw(st.integers(1, 3))
    n = draw(st.integers(1, 2))
    layers = [_layer(draw(st.sampled_from(kinds)), i, draw) for i in range(n)]
    for i, layer in enumerate(layers):
        layer["line"] = 3 + i
    return rows, layers


class Recorder:
    """The statements of the example being run, as a trace."""

    last_failure = None  # (trace text, message) of the last failing run


def machine(adapter, kinds=("kv", "rotating"), lenient=False):
    """A RuleBasedStateMachine class driving ``adapter`` (MODULE[:CLASS], a
    class or an instance factory) against kvspec's core."""
    from .adapters.reference import Adapter as Reference

    class Machine(RuleBasedStateMachine):
        examples = 0          # runs started, shrinking included
        passed = 0            # runs that ended without a failure, before the first one
        not_applicable = 0
        found = False         # a failure was seen: later runs are shrinking

        def __init__(self):
            super().__init__()
            self.run = None
            self.statements = []
            self.header = None
            self.failed = False
            if not Machine.found:
                Machine.examples += 1

        # -- bookkeeping ------------------------------------------------------
        def program(self):
            rows, layers = self.header
            return Program({"format": "kvspec-trace-json", "version": 1, "file": "<random>",
                            "rows": rows, "header_end_line": 2 + len(layers),
                            "layers": layers, "statements": self.statements})

        def line(self):
            return 3 + len(self.header[1]) + len(self.statements)

        def step(self, d):
            """Runs one statement; a refusal of both sides is recorded as
            `expect error` and checked to change nothing."""
            d["line"] = self.line()
            stmt = Statement(d)
            try:
                try:
                    snapshot = [s.call("fork", s.handles[self.run.current])
                                for s in self.run.sides]
                    names = sorted(self.run.engine.handles)
                    refusal = self.run.execute(stmt)
                    if refusal is None:
                        self.statements.append(d)
                        if not stmt.op.startswith("expect"):
                            self.run.compare_state(stmt.line)
                        return
                    wrapped = {"op": "expect error", "line": d["line"], "inner": dict(d)}
                    self.statements.append(wrapped)
                    if sorted(self.run.engine.handles) != names:
                        raise conform.Failure(stmt.line, "a refusal changed the layouts")
                    for s, snap in zip(self.run.sides, snapshot):
                        diff = s.call("difference", snap, s.handles[self.run.current])
                        if diff:
                            raise conform.Failure(stmt.line, "expected the layout unchanged "
                                                  "after the refusal (%s) got %s" % (refusal, diff))
                except conform.Failure as e:
                    if e.reference_refused:
                        d = {"op": "expect error", "line": d["line"], "inner": dict(d)}
                    if not self.statements or self.statements[-1]["line"] != d["line"]:
                        self.statements.append(d)
                    text = self.program().text()
                    Recorder.last_failure = (text, "line %d: %s" % (e.line, e.message))
                    self.failed = Machine.found = True
                    raise AssertionError("line %d: %s\n%s" % (e.line, e.message, text))
            except NotApplicable:
                if not Machine.found:
                    Machine.not_applicable += 1
                assume(False)

        def rows(self):
            return len(self.run.sides[1].call("positions", self.run.sides[1].handles[
                self.run.current]))

        def layout(self):
            return self.run.sides[1].handles[self.run.current].layout

        # -- rules --------------------------------------------------------------
        @initialize(header=headers(kinds))
        def setup(self, header):
            self.header = header
            try:
                self.run = conform._Run(self.program(), conform.load_adapter(adapter),
                                        Reference(), lenient)
                self.run.run()
            except NotApplicable:
                if not Machine.found:
                    Machine.not_applicable += 1
                assume(False)
            except conform.Failure as e:
                Recorder.last_failure = (self.program().text(), e.message)
                self.failed = Machine.found = True
                raise AssertionError(e.message)

        @rule(data=st.data())
        def window(self, data):
            rows = self.rows()
            L = data.draw(st.integers(1, 4))
            positions = self.layout().positions()
            left = [data.draw(st.integers(0, L)) if positions[r] == 0 else 0 for r in range(rows)]
            right = [data.draw(st.integers(0, L - left[r])) for r in range(rows)]
            d = {"op": "window", "columns": L,
                 "left": left if any(left) else None, "right": right if any(right) else None,
                 "ids": None}
            if data.draw(st.booleans()):
                d["ids"] = [[data.draw(st.integers(100, 110)) for _ in range(L - a - b)]
                            for a, b in zip(left, right)]
            self.step(d)

        @rule(data=st.data())
        def decode(self, data):
            ids = None
            if data.draw(st.booleans()):
                ids = [[data.draw(st.integers(100, 110))] for _ in range(self.rows())]
            self.step({"op": "decode", "ids": ids})

        @rule(data=st.data())
        def trim(self, data):
            top = max(self.layout().positions())
            self.step({"op": "trim", "count": data.draw(st.integers(0, max(top, 1))),
                       "bypass": data.draw(st.booleans())})

        @rule()
        def arm(self):
            self.step({"op": "arm"})

        @rule(data=st.data())
        def accept(self, data):
            rows = self.rows()
            if data.draw(st.booleans()):
                keep = [data.draw(st.integers(0, 4))]
            else:
                keep = [data.draw(st.integers(0, 4)) for _ in range(rows)]
            self.step({"op": "accept", "keep": keep})

        @rule(name=st.sampled_from(NAMES))
        def fork(self, name):
            self.step({"op": "fork", "name": name})

        @precondition(lambda self: self.run is not None and len(self.run.engine.handles) > 1)
        @rule(data=st.data())
        def use(self, data):
            self.step({"op": "use", "name": data.draw(st.sampled_from(
                sorted(self.run.engine.handles)))})

        @precondition(lambda self: self.run is not None and len(self.run.engine.handles) > 1)
        @rule(data=st.data())
        def join(self, data):
            others = sorted(n for n in self.run.engine.handles if n != self.run.current)
            self.step({"op": "join", "name": data.draw(st.sampled_from(others))})

        @rule(data=st.data())
        def filter(self, data):
            rows = self.rows()
            keep = sorted(data.draw(st.sets(st.integers(0, rows - 1), min_size=1)))
            self.step({"op": "filter", "rows": keep})

        @rule(data=st.data(), name=st.sampled_from(NAMES))
        def extract(self, data, name):
            self.step({"op": "extract", "row": data.draw(st.integers(0, self.rows() - 1)),
                       "name": name})

        @rule()
        def reload(self):
            self.step({"op": "reload"})

        @precondition(lambda self: self.run is not None and len(self.run.engine.handles) > 1)
        @rule(data=st.data())
        def expect_equal(self, data):
            # Compared on both sides: the adapter must agree with the core
            # about equality, whichever it is.
            name = data.draw(st.sampled_from(sorted(self.run.engine.handles)))
            verdicts = [s.call("difference", s.handles[self.run.current], s.handles[name])
                        for s in self.run.sides]
            if bool(verdicts[0]) != bool(verdicts[1]):
                self.step({"op": "expect equal", "name": name})  # fails with the details

        def teardown(self):
            if self.run is not None and not self.failed and not Machine.found:
                Machine.passed += 1

    Machine.TestCase.settings = settings(max_examples=100, stateful_step_count=20,
                                         deadline=None,
                                         suppress_health_check=list(HealthCheck))
    return Machine


def run_random(adapter, examples, seed=0, max_steps=20, out=None, database=None,
               failure_dir=None, lenient=False, kinds=("kv", "rotating")):
    """Runs ``examples`` random programs of at most ``max_steps`` statements.
    Prints progress, the shrunk failing trace (also written to a file) and
    the closing line; returns the number of failures (0 or 1)."""
    out = out or sys.stdout
    M = machine(adapter, kinds=tuple(kinds), lenient=lenient)
    Recorder.last_failure = None
    db_path = database or os.path.join(os.getcwd(), ".hypothesis", "examples")
    failure_dir = failure_dir or os.getcwd()
    start = time.time()
    failed = 0
    try:
        from hypothesis import seed as hseed
        test = hseed(seed)(lambda: run_state_machine_as_test(M, settings=settings(
            max_examples=examples, stateful_step_count=max_steps, deadline=None,
            database=DirectoryBasedExampleDatabase(db_path), derandomize=False,
            suppress_health_check=list(HealthCheck), print_blob=False)))
        test()
    except AssertionError:
        failed = 1
    elapsed = time.time() - start
    passed = M.passed
    print("# %d examples in %.1f s (seed %d, at most %d steps)%s" % (
        M.examples, elapsed, seed, max_steps, ", then shrinking" if failed else ""), file=out)
    if failed and Recorder.last_failure:
        text, message = Recorder.last_failure
        path = os.path.join(failure_dir, "kvspec-random-%d.trace" % seed)
        with open(path, "w") as f:
            # The note goes last: the trace's line numbers are the report's.
            f.write(text)
            f.write("# found by kvspec.hypothesis (seed %d): %s\n" % (seed, message))
        print("fail %s: %s" % (path, message), file=out)
        print(text, end="", file=out)
    print("%d passed, %d failed, %d not applicable" % (passed, failed, M.not_applicable),
          file=out)
    return failed
