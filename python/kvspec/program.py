"""Parsed traces as Python objects.

A trace is parsed by kvspec's own parser (``kvspec._core.parse_trace``,
trace/program.h) and handed over in the JSON shape of trace/json.h, the
same shape the repository ships for every corpus trace in corpus/emitted/
(``kvspec trace --emit --json``). Both come back as a :class:`Program`.
"""

import json
import os
from typing import TYPE_CHECKING, Any, Dict, Iterable, Tuple, Union

from .errors import TraceSyntaxError

#: A seen item as a trace writes it: ``(pos, id)`` or a tag word.
SeenItem = Union[Tuple[int, int], str]


class Layer:
    """One ``layer`` line of the header."""

    FIELDS = ("name", "kind", "kv", "line", "heads", "qheads", "dim", "window", "capacity",
              "kheads", "dk", "dv", "conv")
    name: str
    kind: str  # "kv", "rotating" or "ssm"
    kv: str  # storage type of an attention layer: "f32", "bf16", "q8_0" or "q4_0"
    line: int
    heads: int
    qheads: int
    dim: int
    window: int
    capacity: int
    kheads: int
    dk: int
    dv: int
    conv: int

    def __init__(self, d: Dict[str, Any]) -> None:
        for f in self.FIELDS:
            setattr(self, f, d[f])

    def as_dict(self) -> Dict[str, Any]:
        return {f: getattr(self, f) for f in self.FIELDS}

    def __repr__(self) -> str:
        return "Layer(%s)" % ", ".join("%s=%r" % (f, getattr(self, f)) for f in self.FIELDS)


class Statement:
    """One statement: ``op`` ("window", "expect sees", ...), ``line`` and the
    op's own fields as attributes (see trace/json.h for each op's fields).
    ``expect error`` holds the refused statement in ``inner``."""

    op: str
    line: int
    emitted_line: int
    inner: "Statement"  # expect error's statement

    if TYPE_CHECKING:
        # the op's own fields (count, name, layer, items, ...), set from the
        # JSON document
        def __getattr__(self, field: str) -> Any: ...

    def __init__(self, d: Dict[str, Any]) -> None:
        self.fields = {k: v for k, v in d.items() if k not in ("op", "line", "source_line")}
        self.op = d["op"]
        # In an emitted (.json) trace, the line of the original trace file
        # (trace/json.h "source_line"); the emitted text's own line beside it.
        self.emitted_line = d["line"]
        self.line = d.get("source_line") or d["line"]
        for k, v in self.fields.items():
            setattr(self, k, Statement(v) if k == "inner" else v)

    def text(self) -> str:
        """The statement back in trace syntax (for reports and shrunk examples)."""
        f, op = self, self.op
        if op == "window":
            s = "window %d" % f.columns
            if f.left is not None:
                s += " left=" + ",".join(map(str, f.left))
            if f.right is not None:
                s += " right=" + ",".join(map(str, f.right))
            if f.ids is not None:
                s += " ids=" + "/".join(",".join(map(str, g)) for g in f.ids)
            return s
        if op == "decode":
            return "decode" + ("" if f.ids is None else
                               " ids=" + "/".join(",".join(map(str, g)) for g in f.ids))
        if op == "trim":
            return "trim %d%s" % (f.count, " bypass" if f.bypass else "")
        if op in ("arm", "reload"):
            return op
        if op == "accept":
            return "accept " + ",".join(map(str, f.keep))
        if op in ("fork", "use", "join"):
            return "%s %s" % (op, f.name)
        if op == "filter":
            return "filter " + ",".join(map(str, f.rows))
        if op == "extract":
            return "extract %d as %s" % (f.row, f.name)
        if op == "expect sees":
            return "expect sees %s r%d p%d: %s" % (f.layer, f.row, f.pos, format_items(f.items))
        if op == "expect out":
            return "expect out %s r%d p%d: %s" % (f.layer, f.row, f.pos,
                                                  " ".join("%.9g" % v for v in f.values))
        if op == "expect positions":
            return "expect positions " + ",".join(map(str, f.positions))
        if op == "expect error":
            return "expect error " + f.inner.text()
        if op == "expect equal":
            return "expect equal %s" % f.name
        if op == "expect trimmable":
            return "expect trimmable %s %s" % (f.layer, "yes" if f.yes else "no")
        if op == "expect kind":
            return "expect kind %s %s" % (f.layer, f.kind)
        if op == "expect bytes_per_token":
            return "expect bytes_per_token %s %d" % (f.layer, f.bytes)
        raise ValueError("unknown op " + op)

    def __repr__(self) -> str:
        return "Statement(line=%d, %s)" % (self.line, self.text())


def format_item(item: SeenItem) -> str:
    """A seen item as the trace prints it: ``pos``, ``pos:id`` or a tag word."""
    if isinstance(item, str):
        return item
    pos, ident = item
    return str(pos) if pos == ident else "%d:%d" % (pos, ident)


def format_items(items: Iterable[SeenItem]) -> str:
    return " ".join(format_item(i) for i in items)


class Program:
    """A parsed trace: ``file``, ``rows``, ``layers`` (list of :class:`Layer`),
    ``statements`` (list of :class:`Statement`), ``header_end_line``."""

    def __init__(self, d: Dict[str, Any]) -> None:
        if d.get("format") != "kvspec-trace-json" or d.get("version") != 1:
            raise ValueError("not a kvspec trace JSON document (format/version)")
        self.file: str = d["file"]
        self.rows: int = d["rows"]
        self.header_end_line: int = d["header_end_line"]
        self.layers = [Layer(x) for x in d["layers"]]
        self.statements = [Statement(x) for x in d["statements"]]

    def layer_index(self, name: str) -> int:
        for i, layer in enumerate(self.layers):
            if layer.name == name:
                return i
        raise KeyError(name)

    def text(self) -> str:
        """The program back as trace text."""
        lines = ["trace 1", "rows %d" % self.rows]
        for layer in self.layers:
            keys = {"kv": ("heads", "dim", "window"), "rotating": ("window", "capacity", "heads", "dim"),
                    "ssm": ("heads", "kheads", "dk", "dv", "conv")}[layer.kind]
            words = ["layer", layer.name, layer.kind]
            for k in keys:
                v = getattr(layer, k)
                if k == "window" and layer.kind == "kv" and v == 0:
                    continue
                words.append("%s=%d" % (k, v))
            if layer.kind != "ssm" and layer.qheads != layer.heads:
                words.append("qheads=%d" % layer.qheads)
            if layer.kind != "ssm" and layer.kv != "f32":
                words.append("kv=%s" % layer.kv)
            lines.append(" ".join(words))
        lines += [s.text() for s in self.statements]
        return "\n".join(lines) + "\n"


def parse_trace(text: str, file: str = "<string>") -> Program:
    """Parses trace text with kvspec's own parser (needs the compiled module).
    Raises :class:`kvspec.TraceSyntaxError` with ``FILE:LINE:COL: message``."""
    from . import _core
    return Program(_core.parse_trace(text, file))


# The most bytes an emitted ``.json`` file may hold (the trace with its
# expectations written out, each statement an object; a ``.trace`` file may
# hold ``kvspec.MAX_TRACE_BYTES``, the parser's limit): checked while
# reading, so that a larger file is never held whole.
MAX_EMITTED_BYTES = 64 << 20


def _read_bounded(path: str, limit: int) -> str:
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TraceSyntaxError("%s:1:1: file larger than %d MiB" % (path, limit >> 20))
    return data.decode("utf-8")


def load(path: str) -> Program:
    """A trace file: ``.json`` (emitted form, pure Python) or ``.trace``
    (through kvspec's parser, needs the compiled module). Raises
    :class:`kvspec.TraceSyntaxError` for a file over ``MAX_EMITTED_BYTES``
    (.json) or ``kvspec.MAX_TRACE_BYTES`` (.trace), read no further
    than that."""
    if path.endswith(".json"):
        return Program(json.loads(_read_bounded(path, MAX_EMITTED_BYTES)))
    from . import HAVE_CORE, _core
    if not HAVE_CORE:
        raise TraceSyntaxError(
            "%s: a .trace file needs the compiled module kvspec._core; in pure-Python mode "
            "run the emitted form (corpus/emitted/%s)" % (path, os.path.basename(path)[:-len(".trace")] + ".json"))
    return parse_trace(_read_bounded(path, _core.MAX_TRACE_BYTES), path)
