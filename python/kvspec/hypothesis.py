"""Property-based differential testing of any adapter (needs kvspec._core).

:func:`machine` builds a Hypothesis ``RuleBasedStateMachine`` whose rules
are trace statements (window, decode, trim, arm, accept, fork, use, join,
filter, extract, reload, expect equal), with arguments drawn from the
current state. It drives an adapter in lockstep with kvspec's core (the
model, kvspec.adapters.reference) through the runner's own machinery, so
every observable is compared after every step exactly as
``kvspec.conform`` does for trace files. An operation both sides refuse is
fine (it is recorded as ``expect error OP`` and must change nothing).

Every distinct failure Hypothesis finds (an adapter's exception included)
shrinks to a minimal program, which is listed and written as a trace file
that reproduces it with ``python3 -m kvspec.conform --adapter ... FILE``
(kvspec.findings); the run ends with its summary line, never a traceback;
Hypothesis keeps them in its example database (``.hypothesis/`` in the
working directory by default), so they are replayed first next time.

From the command line::

    python3 -m kvspec.conform --adapter MODULE[:CLASS] --random N [--seed S] [--max-steps K]

From pytest::

    from kvspec.hypothesis import machine
    TestMyEngine = machine("my_engine:Adapter").TestCase
"""

import os
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, TextIO, Tuple, Type, cast

import hypothesis.strategies as st
from hypothesis import HealthCheck, assume, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import Unsatisfiable
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, \
    run_state_machine_as_test

from .conform import AdapterSpec, load_adapter
from .errors import NotApplicable
from .findings import KNOWN as KNOWN, FoundFailure, KnownClass as KnownClass, \
    classify as classify, collect, error_text, signature as signature, _slug
from .lockstep import Failure, Lockstep
from .program import Program, Statement

NAMES = ["b", "c", "d"]

#: A drawn trace header: rows and the layers (as kvspec.program.Layer's dicts).
Header = Tuple[int, List[Dict[str, Any]]]


def _layer(kind, i, draw):
    name = "l%d" % i
    full = kind == "kv-full"  # a kv layer without a window
    if full:
        kind = "kv"
    d = {"name": name, "kind": kind, "kv": "f32", "line": 0, "heads": 1, "qheads": 1, "dim": 4,
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


class _NoLayout:
    def positions(self):
        return [0]


class Recorder:
    """The statements of the example being run, as a trace."""

    last_failure: Optional[Tuple[str, str]] = None  # (trace text, message) of the last failing run


def machine(adapter: AdapterSpec, kinds: Sequence[str] = ("kv", "rotating"),
            lenient: bool = False, keep_going: bool = False) -> Type[RuleBasedStateMachine]:
    """A RuleBasedStateMachine class driving ``adapter`` (MODULE[:CLASS], a
    class or an instance factory) against kvspec's core."""
    from .adapters.reference import Adapter as Reference

    class Machine(RuleBasedStateMachine):
        examples = 0          # runs started, shrinking included
        passed = 0            # runs that ended without a failure, before the first one
        not_applicable = 0
        found = False         # a failure was seen: later runs are shrinking
        target: Optional[str] = None  # keep_going: the signature being shrunk
        failures: Dict[str, int] = {}  # keep_going: signature -> failed examples
        examples_before = 0   # keep_going: examples of earlier segments
        passed_before = 0
        progress = 0          # seconds between progress lines (0: none)
        max_classes = 40      # keep_going: classes shrunk at most
        shrink_limit = 0      # keep_going: seconds of shrinking per class (0: no limit)
        shrink_start = 0.0
        shrink_cut = False    # the last shrink was stopped by shrink_limit
        last_tick = 0.0
        start = 0.0
        out = sys.stdout

        def __init__(self) -> None:
            super().__init__()
            self.run: Optional[Lockstep] = None
            self.statements: List[Dict[str, Any]] = []
            self.header: Optional[Header] = None
            self.failed = False
            self.dead = False  # keep_going: a counted failure, the rest does nothing
            self.inapplicable = False  # counted as not applicable, not as passed
            if not Machine.found:
                Machine.examples += 1
            Machine.tick()

        @classmethod
        def tick(cls):
            """A progress line at least every ``progress`` seconds."""
            now = time.monotonic()
            if cls.progress and now - cls.last_tick >= cls.progress:
                cls.last_tick = now
                print("# progress: %d examples, %d passed, %d failed (%d classes), %.0f s%s" % (
                    cls.examples_before + cls.examples, cls.passed_before + cls.passed,
                    sum(cls.failures.values()), len(cls.failures), now - cls.start,
                    ", shrinking" if cls.found else ""), file=cls.out, flush=True)

        # -- bookkeeping ------------------------------------------------------
        def program(self):
            rows, layers = cast(Header, self.header)
            return Program({"format": "kvspec-trace-json", "version": 1, "file": "<random>",
                            "rows": rows, "header_end_line": 2 + len(layers),
                            "layers": layers, "statements": self.statements})

        def line(self):
            return 3 + len(cast(Header, self.header)[1]) + len(self.statements)

        def p_line(self):
            return 2 + len(cast(Header, self.header)[1])

        def step(self, d):
            """Runs one statement; a refusal of both sides is recorded as
            `expect error` and checked to change nothing."""
            if self.dead:
                return
            run = cast(Lockstep, self.run)  # set up unless the example is dead
            d["line"] = self.line()
            stmt = Statement(d)
            try:
                try:
                    snapshot = [s.call("fork", s.handles[run.current])
                                for s in run.sides]
                    names = sorted(run.engine.handles)
                    refusal = run.execute(stmt)
                    if refusal is None:
                        self.statements.append(d)
                        if not stmt.op.startswith("expect"):
                            run.compare_state(stmt.line)
                        return
                    wrapped = {"op": "expect error", "line": d["line"], "inner": dict(d)}
                    self.statements.append(wrapped)
                    if sorted(run.engine.handles) != names:
                        raise Failure(stmt.line, "a refusal changed the layouts")
                    for s, snap in zip(run.sides, snapshot):
                        diff = s.call("difference", snap, s.handles[run.current])
                        if diff:
                            raise Failure(stmt.line, "expected the layout unchanged "
                                          "after the refusal (%s) got %s" % (refusal, diff))
                except (Failure, NotApplicable):
                    raise
                except Exception as e:  # an adapter error is a failure of the example too
                    raise Failure(stmt.line, "%s: %s" % (type(e).__name__, e))
            except Failure as e:
                if e.reference_refused:
                    d = {"op": "expect error", "line": d["line"], "inner": dict(d)}
                if not self.statements or self.statements[-1]["line"] != d["line"]:
                    self.statements.append(d)
                self.fail(self.statements[-1], e.line, e.message)
            except NotApplicable:
                if not Machine.found:
                    Machine.not_applicable += 1
                self.inapplicable = True
                assume(False)

        def fail(self, d, line, message):
            """A failed example. Without keep_going, or for a failure of a
            new class, it is raised for Hypothesis to shrink; with keep_going
            a failure of a class already shrunk (or, while shrinking, of
            another class than the one being shrunk) ends the example: it is
            counted and the remaining steps do nothing."""
            text = self.program().text()
            sig = signature(d, message)
            self.failed = True
            if keep_going:
                if Machine.found and sig != Machine.target:
                    self.dead = True  # shrinking keeps the class it started with
                    return
                if not Machine.found and (sig in Machine.failures or
                                          len(Machine.failures) >= Machine.max_classes):
                    # a known class, or too many classes to shrink them all
                    Machine.failures[sig] = Machine.failures.get(sig, 0) + 1
                    self.dead = True
                    return
                if not Machine.found:
                    Machine.target = sig
                    Machine.failures[sig] = Machine.failures.get(sig, 0) + 1
            Recorder.last_failure = (text, "line %d: %s" % (line, message))
            if not Machine.found:
                Machine.shrink_start = time.monotonic()
            Machine.found = True
            raise FoundFailure(text, line, message, sig)

        def rows(self):
            if self.run is None:  # an example cut by the shrink time limit
                return 1
            return len(self.run.sides[1].call("positions", self.run.sides[1].handles[
                self.run.current]))

        def layout(self):
            if self.run is None:
                return _NoLayout()
            return self.run.sides[1].handles[self.run.current].layout

        # -- rules --------------------------------------------------------------
        @initialize(header=headers(kinds))
        def setup(self, header):
            self.header = header
            if Machine.found and Machine.shrink_limit and \
                    time.monotonic() - Machine.shrink_start > Machine.shrink_limit:
                # keep_going: shrinking ran out of time; the remaining
                # attempts do nothing (Hypothesis then ends the shrink)
                Machine.shrink_cut = True
                self.dead = self.failed = True
                return
            try:
                self.run = Lockstep(self.program(), load_adapter(adapter),
                                        Reference(), lenient)
                self.run.run()
            except NotApplicable:
                if not Machine.found:
                    Machine.not_applicable += 1
                self.inapplicable = True
                assume(False)
            except Failure as e:
                self.fail({"op": "header"}, e.line, e.message)
            except Exception as e:
                self.fail({"op": "header"}, self.p_line(), "%s: %s" % (type(e).__name__, e))

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
            run = cast(Lockstep, self.run)  # the precondition: set up
            self.step({"op": "use", "name": data.draw(st.sampled_from(
                sorted(run.engine.handles)))})

        @precondition(lambda self: self.run is not None and len(self.run.engine.handles) > 1)
        @rule(data=st.data())
        def join(self, data):
            run = cast(Lockstep, self.run)  # the precondition: set up
            others = sorted(n for n in run.engine.handles if n != run.current)
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

        @precondition(lambda self: self.run is not None and len(self.run.engine.handles) > 1
                      and not self.dead)
        @rule(data=st.data())
        def expect_equal(self, data):
            run = cast(Lockstep, self.run)  # the precondition: set up
            # Compared on both sides: the adapter must agree with the core
            # about equality, whichever it is.
            name = data.draw(st.sampled_from(sorted(run.engine.handles)))
            try:
                verdicts = [s.call("difference", s.handles[run.current], s.handles[name])
                            for s in run.sides]
            except NotApplicable:
                raise
            except Exception:
                verdicts = [None, "an adapter error"]  # step() reports it as a failure
            if bool(verdicts[0]) != bool(verdicts[1]):
                self.step({"op": "expect equal", "name": name})  # fails with the details

        def teardown(self):
            if self.run is not None and not self.failed and not self.inapplicable \
                    and not Machine.found:
                Machine.passed += 1

    Machine.TestCase.settings = settings(max_examples=100, stateful_step_count=20,
                                         deadline=None,
                                         suppress_health_check=list(HealthCheck))
    return Machine


def run_random(adapter: AdapterSpec, examples: int, seed: int = 0, max_steps: int = 20,
               out: Optional[TextIO] = None, database: Optional[str] = None,
               failure_dir: Optional[str] = None, lenient: bool = False,
               kinds: Sequence[str] = ("kv", "rotating"), keep_going: bool = False,
               progress: float = 60, known: Optional[Sequence[KnownClass]] = None,
               time_budget: Optional[float] = None,
               shrink_seconds: Optional[float] = None) -> int:
    """Runs ``examples`` random programs of at most ``max_steps`` statements.
    Prints progress, every distinct failure Hypothesis found, shrunk (each
    also written to a file in ``failure_dir``), and the closing line;
    returns the number of failures listed.

    keep_going: a failure does not end the run. Its example is shrunk (to a
    program failing with the same :func:`signature`), the shrunk trace is
    written to ``failure_dir`` (created) and classified (:func:`classify`),
    and the run goes on with a new Hypothesis seed for the examples left;
    later failures of a class already shrunk are counted, not shrunk. The
    examples run in segments of CHUNK; time_budget (seconds, keep_going
    only) ends the run after the segment that exceeds it, and the summary
    says so; shrink_seconds bounds the shrinking of each class (the
    stored trace then says shrinking was stopped). The summary gives the examples run, passed and failed per
    class, and where each shrunk trace is; returns the number of failed
    examples."""
    if keep_going:
        return _run_keep_going(adapter, examples, seed, max_steps, out, failure_dir, lenient,
                               kinds, progress, known, time_budget, shrink_seconds)
    out = out or sys.stdout
    M: Any = machine(adapter, kinds=tuple(kinds), lenient=lenient)
    M.out, M.progress, M.start, M.last_tick = out, progress, time.monotonic(), time.monotonic()
    Recorder.last_failure = None
    db_path = database or os.path.join(os.getcwd(), ".hypothesis", "examples")
    failure_dir = failure_dir or os.getcwd()
    start = time.monotonic()
    error: Optional[Exception] = None
    try:
        from hypothesis import seed as hseed
        test = hseed(seed)(lambda: run_state_machine_as_test(M, settings=settings(
            max_examples=examples, stateful_step_count=max_steps, deadline=None,
            database=DirectoryBasedExampleDatabase(db_path), derandomize=False,
            suppress_health_check=list(HealthCheck), print_blob=False)))
        test()
    except Exception as e:  # one failure, a group of distinct ones, or another error
        error = e
    found, other = collect(error) if error is not None else ([], [])
    unsatisfiable = [e for e in other if isinstance(e, Unsatisfiable)]
    other = [e for e in other if not isinstance(e, Unsatisfiable)]
    failed = len(found) + len(other)
    elapsed = time.monotonic() - start
    print("# %d examples in %.1f s (seed %d, at most %d steps)%s" % (
        M.examples, elapsed, seed, max_steps, ", then shrinking" if failed else ""), file=out)
    if unsatisfiable and not M.passed:
        print("# no example was applicable to the adapter", file=out)
    # Every failure Hypothesis found, shrunk, is written and listed; the
    # first one keeps the name kvspec-random-SEED.trace.
    for i, f in enumerate(found):
        name = "kvspec-random-%d%s.trace" % (seed, "-%d" % (i + 1) if i else "")
        path = os.path.join(failure_dir, name)
        with open(path, "w") as fh:
            # The note goes last: the trace's line numbers are the report's.
            fh.write(f.text)
            fh.write("# found by kvspec.hypothesis (seed %d): %s\n" % (seed, f.report))
        print("fail %s: %s" % (path, f.report), file=out)
        print(f.text, end="", file=out)
    for err in other:
        # not an example's failure (e.g. Hypothesis' Flaky: a failure that
        # did not repeat); the last failing program run, when there is one
        print("fail <random seed %d>: %s" % (seed, error_text(err)), file=out)
        if Recorder.last_failure and not found:
            text, message = Recorder.last_failure
            print("# the last failing program (%s):" % message, file=out)
            print(text, end="", file=out)
    print("%d passed, %d failed, %d not applicable" % (M.passed, failed, M.not_applicable),
          file=out)
    return failed


CHUNK = 100  # keep_going: examples per Hypothesis run


def _run_keep_going(adapter: AdapterSpec, examples: int, seed: int, max_steps: int,
                    out: Optional[TextIO], failure_dir: Optional[str], lenient: bool,
                    kinds: Sequence[str], progress: float, known: Optional[Sequence[KnownClass]],
                    time_budget: Optional[float], shrink_seconds: Optional[float]) -> int:
    from hypothesis import Phase
    from hypothesis import seed as hseed
    out = out or sys.stdout
    failure_dir = failure_dir or os.path.join(os.getcwd(), "kvspec-random-%d" % seed)
    os.makedirs(failure_dir, exist_ok=True)
    M: Any = machine(adapter, kinds=tuple(kinds), lenient=lenient, keep_going=True)
    M.out, M.progress, M.start, M.last_tick = out, progress, time.monotonic(), time.monotonic()
    M.shrink_limit = shrink_seconds or 0
    shrunk: List[Tuple[Optional[str], str, str, str]] = []  # (signature, class, path, message)
    errors: List[str] = []  # errors that are not an example's failure
    segment = 0
    stopped = False
    while M.examples_before < examples:
        if segment and time_budget and time.monotonic() - M.start >= time_budget:
            stopped = True
            break
        M.examples = M.passed = 0
        M.found, M.target, M.shrink_cut = False, None, False
        Recorder.last_failure = None
        # segments of at most CHUNK examples, each with a seed of its own, so
        # that a time budget is checked between them
        left = min(examples - M.examples_before, CHUNK)
        test = hseed(seed * 1000 + segment)(lambda: run_state_machine_as_test(M, settings=settings(
            max_examples=left, stateful_step_count=max_steps, deadline=None, database=None,
            derandomize=False, suppress_health_check=list(HealthCheck), print_blob=False,
            phases=[Phase.generate, Phase.shrink])))
        failed = False
        error: Optional[Exception] = None
        try:
            test()
        except Exception as e:  # the failure, or Hypothesis's Flaky on a non-repeatable one
            error = e
        found, other = collect(error) if error is not None else ([], [])
        other = [e for e in other if not isinstance(e, Unsatisfiable)]
        # the shrunk failure of the class being shrunk (the first when it was
        # raised from several places), else the last failing program run
        mine = [f for f in found if f.signature == M.target] or found
        if mine:
            Recorder.last_failure = (mine[0].text, mine[0].report)
        failed = bool(found or other)
        M.examples_before += M.examples
        M.passed_before += M.passed
        segment += 1
        if failed and Recorder.last_failure is None:
            # not an example's failure: listed and counted, and the run stops
            errors.append(error_text(other[0]))
            print("fail <random seed %d, segment %d>: %s" % (seed, segment - 1, errors[-1]),
                  file=out, flush=True)
            break
        if not failed:
            # Hypothesis ran ``left`` valid examples, or found no more to run
            if M.examples == 0:
                break
            continue
        text, message = cast(Tuple[str, str], Recorder.last_failure)  # set by the failure
        cls = classify(text, message, known)
        path = os.path.join(failure_dir, "%03d-%s.trace" % (len(shrunk) + 1, _slug(M.target)))
        with open(path, "w") as f:
            f.write(text)
            f.write("# found by kvspec.hypothesis --keep-going (seed %d, segment %d): %s\n"
                    "# signature: %s\n# class: %s\n" % (seed, segment - 1, message, M.target,
                                                         cls))
            if M.shrink_cut:
                f.write("# shrinking stopped after %g s (--shrink-seconds)\n" % M.shrink_limit)
        shrunk.append((M.target, cls, path, message))
        print("fail %s: %s [%s]" % (path, message, cls), file=out, flush=True)
        print(text, end="", file=out, flush=True)
    elapsed = time.monotonic() - M.start
    nfail = sum(M.failures.values()) + len(errors)
    print("# %d examples in %.1f s (seed %d, at most %d steps, keep going%s)" % (
        M.examples_before, elapsed, seed, max_steps,
        ", stopped by the time budget of %g s before %d examples" % (
            cast(float, time_budget), examples) if stopped else ""), file=out)
    for sig, cls, path, message in shrunk:
        print("# class %s: %d examples failed; shrunk: %s; %s" % (
            sig, M.failures.get(sig, 0), path, cls), file=out)
    print("%d passed, %d failed, %d not applicable" % (M.passed_before, nfail,
                                                        M.not_applicable), file=out, flush=True)
    return nfail
