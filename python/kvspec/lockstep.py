"""Lockstep runs: one trace program driven through an adapter and, when
given, kvspec's core (the reference) side by side, every observable compared
after every statement. The conformance runner (kvspec.conform) runs trace
files this way; the random mode (kvspec.hypothesis) steps through generated
programs with the same machinery.
"""

from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple, \
    Union, cast

from . import program as programs
from .adapter import Adapter, ForwardResult, Item
from .errors import NotApplicable, Refused
from .program import Program, Statement

MAX_ROWS = 64
OUT_TOLERANCE = 1e-4

class Failure(Exception):
    """A failed check: the trace line and what was expected and got."""

    def __init__(self, line: Optional[int], message: str,
                 reference_refused: bool = False) -> None:
        super().__init__(message)
        self.line = line
        self.message = message
        # The reference refused the statement the adapter accepted.
        self.reference_refused = reference_refused



def _norm_item(item: Item) -> Item:
    if isinstance(item, str):
        return item
    pos, ident = item
    return (int(pos), int(ident))


def _sorted_items(items: Iterable[Item]) -> List[Item]:
    return sorted((_norm_item(i) for i in items),
                  key=lambda i: (1, i, 0) if isinstance(i, str) else (0, "", i))


def _items_text(items: Iterable[Item]) -> str:
    return programs.format_items(_sorted_items(items))


class Side:
    """One engine's view of a trace: its adapter, named handles, the last
    forward of each."""

    def __init__(self, adapter: Adapter) -> None:
        self.adapter = adapter
        self.handles: Dict[str, Any] = {}
        self.last: Dict[str, Optional[ForwardResult]] = {}

    def call(self, method: str, *args: Any) -> Any:
        return getattr(self.adapter, method)(*args)


class Lockstep:
    """One program run statement by statement on ``sides``: the adapter's
    (``engine``) and, with a reference, kvspec's core's. A check that fails
    raises :class:`Failure`; a statement the adapter cannot express raises
    :class:`NotApplicable`."""

    def __init__(self, prog: Program, adapter: Adapter, reference: Optional[Adapter],
                 lenient: bool = False) -> None:
        self.p = prog
        # lenient: an operation the reference refuses and the engine accepts
        # is undone on the engine's side (from a fork taken before it),
        # counted as a "missing refusal" and the trace goes on, so that the
        # rest of a trace is still compared for an engine that does not
        # refuse what kvspec refuses (docs/engines/llama.cpp.md).
        self.lenient = lenient and reference is not None
        self.sides = [Side(adapter)] + ([Side(reference)] if reference is not None else [])
        self.current = "main"
        self.layer_names = [layer.name for layer in prog.layers]
        self.unobserved: FrozenSet[str] = frozenset(getattr(adapter, "unobserved", ()))
        self.unchecked: Dict[str, int] = {}

    def not_compared(self, op: str) -> None:
        self.unchecked[op] = self.unchecked.get(op, 0) + 1

    # -- helpers ---------------------------------------------------------------
    @property
    def engine(self) -> Side:
        return self.sides[0]

    def rows(self) -> int:
        return len(self.engine.call("positions", self.engine.handles[self.current]))

    def apply(self, side: Side, method: str, *args: Any, name: Optional[str] = None) -> None:
        """Calls a mutating adapter method on the current (or named) handle;
        a returned handle replaces it."""
        name = name or self.current
        h = side.call(method, side.handles[name], *args)
        if h is not None:
            side.handles[name] = h

    def both(self, st: Statement, fn: Callable[[Side], None]) -> Optional[str]:
        """Runs fn(side) on every side; returns the engine's refusal message
        (None when it was accepted). A disagreement with the reference about
        refusing is a divergence."""
        outcomes: List[Optional[str]] = []
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
    def run(self) -> None:
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

    def execute(self, st: Statement) -> Optional[str]:
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

            def join(s: Side) -> None:
                self.apply(s, "join", s.handles[st.name])
                s.last[self.current] = None
            return self.both(st, join)
        if op == "filter":
            rows = self.rows()
            if not st.rows or any(b <= a for a, b in zip(st.rows, st.rows[1:])) or \
                    st.rows[-1] >= rows:
                return "filter: rows must be a non-empty ascending list of existing rows"

            def filt(s: Side) -> None:
                self.apply(s, "filter", list(st.rows))
                s.last[self.current] = None
            return self.both(st, filt)
        if op == "extract":
            if st.name in self.engine.handles:
                return "extract: a layout named '%s' exists" % st.name
            if st.row >= self.rows():
                return "extract: row %d out of range" % st.row

            def extract(s: Side) -> None:
                h = s.call("extract", s.handles[self.current], st.row)
                s.handles[st.name] = h
                s.last[st.name] = None
            return self.both(st, extract)
        if op == "reload":
            return self.both(st, lambda s: self.apply(s, "reload"))
        if op == "expect error":
            self.expect_error(st)
            return None
        self.expect(st)
        return None

    def forward(self, st: Statement) -> Optional[str]:
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

        def fwd(s: Side) -> None:
            h = s.handles[self.current]
            result = s.adapter.forward(h, columns, ids, positions, left, right, decode)
            s.last[self.current] = result
        refusal = self.both(st, fwd)
        if refusal is None and len(self.sides) == 2:
            self.compare_forward(st)
        return refusal

    # -- comparisons with the reference -----------------------------------------
    def compare_forward(self, st: Statement) -> None:
        # both sides' last forward of this layout is the one just made
        got = cast(ForwardResult, self.engine.last[self.current])
        want = cast(ForwardResult, self.sides[1].last[self.current])
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

    def check_values(self, st: Statement, key: Tuple[int, int, int], want: Sequence[float],
                     got: Sequence[float], prefix: str = "") -> None:
        layer, row, pos = key
        ok = len(want) == len(got) and all(
            abs(float(g) - float(w)) <= OUT_TOLERANCE * (1 + abs(float(w)))
            for w, g in zip(want, got))
        if not ok:
            raise Failure(st.line, "%sout %s r%d p%d: expected %s got %s" % (
                prefix, self.layer_names[layer], row, pos,
                " ".join("%.9g" % v for v in want), " ".join("%.9g" % v for v in got)))

    def observe(self, side: Side, name: str) -> Dict[str, Union[int, str, List[int]]]:
        h = side.handles[name]
        a = side.adapter
        obs: Dict[str, Union[int, str, List[int]]] = {"positions": list(a.positions(h))}
        for i in range(len(self.p.layers)):
            n = self.layer_names[i]
            if "kind" not in self.unobserved:
                obs["kind " + n] = a.kind(h, i)
            if "trimmable" not in self.unobserved:
                obs["trimmable " + n] = "yes" if a.trimmable(h, i) else "no"
            if "bytes_per_token" not in self.unobserved:
                obs["bytes_per_token " + n] = int(a.bytes_per_token(h, i))
        return obs

    def compare_state(self, line: int) -> None:
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
    def expect_error(self, st: Statement) -> None:
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

    def expect(self, st: Statement) -> None:
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
            out = None if last is None else last.out
            if last is not None and out is None:
                raise NotApplicable("the adapter computes no outputs (expect out, line %d)"
                                    % st.line)
            if out is None or key not in out:
                raise Failure(st.line, "expected %s %s got no such query in the last forward" % (
                    what, " ".join("%.9g" % v for v in st.values)))
            self.check_values(st, key, st.values, list(out[key]))
            return
        if op == "expect positions":
            positions = list(eng.call("positions", h))
            if len(positions) != len(st.positions):
                raise Failure(st.line, "error: expect positions lists %d values for %d rows" % (
                    len(st.positions), len(positions)))
            if positions != list(st.positions):
                raise Failure(st.line, "expected positions %s got %s" % (
                    ",".join(map(str, st.positions)), ",".join(map(str, positions))))
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
            trimmable = bool(eng.call("trimmable", h, layer))
            if trimmable != st.yes:
                raise Failure(st.line, "expected trimmable %s %s got %s" % (
                    st.layer, "yes" if st.yes else "no", "yes" if trimmable else "no"))
        elif op == "expect kind":
            kind = eng.call("kind", h, layer)
            if kind != st.kind:
                raise Failure(st.line, "expected kind %s %s got %s" % (st.layer, st.kind, kind))
        elif op == "expect bytes_per_token":
            per_token = int(eng.call("bytes_per_token", h, layer))
            if per_token != st.bytes:
                raise Failure(st.line, "expected bytes_per_token %s %d got %d" % (
                    st.layer, st.bytes, per_token))
        else:
            raise Failure(st.line, "unknown statement %s" % op)

