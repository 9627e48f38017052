"""What a random run (kvspec.hypothesis) finds: each failure as a shrunk
trace, its class (:func:`signature`), the known classes of the llama.cpp
adapter (:func:`classify`), and the failures out of whatever Hypothesis
raised at the end of a run (:func:`collect`), so that the run lists every
one of them instead of ending in a traceback."""

import os
import re
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple


class FoundFailure(AssertionError):
    """A failing example of the random machine: the program as a trace
    (``text``), the failing line and message, and its :func:`signature`.
    Hypothesis shrinks it like any assertion and raises it again at the
    end, on its own or in an exception group with the other failures."""

    def __init__(self, text: str, line: int, message: str, sig: str) -> None:
        super().__init__("line %d: %s\n%s" % (line, message, text))
        self.text = text
        self.line = line
        self.message = message
        self.signature = sig

    @property
    def report(self) -> str:
        return "line %d: %s" % (self.line, self.message)


def leaves(error: BaseException) -> List[BaseException]:
    """The exceptions inside an exception group (Hypothesis raises one when
    it found several distinct failures), in order; ``[error]`` otherwise."""
    inner = getattr(error, "exceptions", None)  # an ExceptionGroup (Python 3.11 or backport)
    if isinstance(inner, (list, tuple)):
        out: List[BaseException] = []
        for e in inner:
            out.extend(leaves(e))
        return out
    return [error]


def error_text(error: BaseException) -> str:
    """An unexpected error in one line: its type, message and where it was
    raised (the innermost frame), not a traceback."""
    frames = traceback.extract_tb(error.__traceback__)
    where = " (at %s:%s)" % (os.path.basename(frames[-1].filename), frames[-1].lineno) \
        if frames else ""
    first = str(error).strip().splitlines()
    return "%s: %s%s" % (type(error).__name__, first[0] if first else "", where)


def collect(error: BaseException) -> Tuple[List[FoundFailure], List[BaseException]]:
    """Splits what Hypothesis raised into the failing examples found (each
    shrunk, with its trace) and anything else (an error that is not an
    example's failure, e.g. Hypothesis' Flaky)."""
    found: List[FoundFailure] = []
    other: List[BaseException] = []
    for e in leaves(error):
        if isinstance(e, FoundFailure):
            found.append(e)
        else:
            other.append(e)
    return found, other


def _strip_parens(text):
    """text without its parenthesized parts (innermost first)."""
    while True:
        t = re.sub(r"\s*\([^()]*\)", "", text)
        if t == text:
            return t
        text = t


def signature(statement: Dict[str, Any], message: str) -> str:
    """The stable class of a failure: the failing statement's kind (``expect
    error`` with its inner statement) and the message with every number,
    list, layout name and parenthesized detail taken out, e.g. ``trim |
    differs from the reference: positions expected N got N``."""
    op = statement.get("op", "?")
    if op == "expect error":
        op = "expect error " + statement.get("inner", {}).get("op", "?")
    m = _strip_parens(message)
    m = re.sub(r"\[[^\]]*\]", "N", m)                   # lists: [1, 2], ['a']
    m = re.sub(r"\b(equal|named) '?\w+'?", r"\1 NAME", m)  # layout names
    m = re.sub(r"\b([lrp])\d+\b", r"\1N", m)              # layers, rows, positions
    m = re.sub(r"[-\d][-\d:,./e]*", "N", m)                # numbers, items 3:104, 5,5
    m = re.sub(r"N(\s+N)+", "N", m)                       # runs of items
    m = re.sub(r"\s+", " ", m).strip()
    return "%s | %s" % (op, m)


#: A known failure class: (name, test(shrunk trace text, message)).
KnownClass = Tuple[str, Callable[[str, str], bool]]


# Known failure classes of the llama.cpp adapter (docs/engines/llama.cpp.md),
# matched on the shrunk trace: (class, test(trace text, message)). A match is
# a hint for the report, not a proof: every new shrunk trace is checked by
# hand.
def _has(text, *words):
    return any(re.search(r"(^|\n)\s*(expect error )?%s\b" % w, text) for w in words)


def _windowed(text):
    return re.search(r"rotating|window=[1-9]", text) is not None


#: The run's engine settings (--setting), which some known classes depend on.
SETTINGS: Dict[str, Any] = {}


def _settings() -> str:
    return ",".join("%s=%s" % kv for kv in sorted(SETTINGS.items()))


KNOWN: List[KnownClass] = [
    # a state copy: fork / extract / filter / join / reload, or the lenient
    # undo of a missing refusal (an `expect error` the engine accepted)
    ("L1 SWA state copy is lossy", lambda t, m: _windowed(t) and "seq_cp=1" not in _settings()
        and _has(t, "fork", "extract", "filter", "join", "reload", "expect error") and (
        "sees" in m or "positions expected" in m or "probe decode" in m)),
    ("L2 window 1: a masked last cell is taken", lambda t, m: "seq_cp=1" in _settings() and
        re.search(r"window=1\b", t) is not None and "positions expected" in m),
    ("L1 SWA state copy is lossy (reload)", lambda t, m: _windowed(t) and _has(t, "reload") and (
        "sees" in m or "positions expected" in m or "probe decode" in m)),
    ("B2 recurrent rollback restored wrongly", lambda t, m: " ssm" in t and _has(
        t, "accept", "trim") and "llama_state_seq_get_data differs" in m),
    ("D6 rollback bounded by n_rs_seq", lambda t, m: " ssm" in t and
        "to be accepted got refused" in m and "n_rs_seq" in m),
    ("D8 state not portable between contexts (kv_unified=0)", lambda t, m:
        "n_stream" in m or "set_data refused" in m or "llama_state_seq_set_data refused" in m),
]


def classify(text: str, message: str, known: Optional[Sequence[KnownClass]] = None) -> str:
    """The known class a shrunk failure matches (see KNOWN), or "new"."""
    for name, test in (KNOWN if known is None else known):
        if test(text, message):
            return name
    return "new"


def _slug(sig):
    s = re.sub(r"[^a-z0-9]+", "-", sig.lower()).strip("-")
    return s[:60].strip("-") or "failure"
