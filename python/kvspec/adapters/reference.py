"""kvspec's own core as an adapter: what the runner compares every engine with.

Each handle holds a ``kvspec.Layout`` and the trace's token contents
(``kvspec.TraceContents``: one per trace, shared by every layout forked or
extracted from it, since contents depend on (layer, id, pos) only). Forwards
write TRACE.md's contents and read back what each query saw from the bytes
stored in the slots the layout's mask admits (``kvspec.trace_forward``).
"""

from typing import List, Optional

from .. import _core
from ..adapter import Adapter as Base, ForwardResult
from ..program import Layer


class Handle:
    """A layout and its trace's contents."""

    def __init__(self, layout: _core.Layout, contents: _core.TraceContents) -> None:
        self.layout = layout
        self.contents = contents


class Adapter(Base):
    name = "reference"

    def __init__(self, reference_kernels: bool = False) -> None:
        self.reference_kernels = reference_kernels

    def create(self, rows: int, layers: List[Layer]) -> Handle:
        configs = [_core.LayerConfig(
            l.name, l.kind, heads=l.heads, q_heads=l.qheads, dim=l.dim, window=l.window,
            capacity=l.capacity, kheads=l.kheads, dk=l.dk, dv=l.dv, conv=l.conv, kv=l.kv)
            for l in layers]
        layout = _core.Layout(rows, configs)
        layout.reference_kernels = self.reference_kernels
        return Handle(layout, _core.TraceContents())

    def forward(self, h: Handle, columns: int, ids: List[List[int]], positions: List[List[int]],
                left: List[int], right: List[int], decode: bool) -> ForwardResult:
        seen, out = _core.trace_forward(h.layout, h.contents, columns, left, right, ids, decode)
        return ForwardResult(seen, out)

    def trim(self, h: Handle, n: int, bypass: bool) -> None:
        h.layout.trim(n, bypass)

    def arm(self, h: Handle) -> None:
        h.layout.arm()

    def accept(self, h: Handle, keep: List[int]) -> None:
        h.layout.accept(keep)

    def fork(self, h: Handle) -> Handle:
        return Handle(h.layout.copy(), h.contents)

    def filter(self, h: Handle, rows: List[int]) -> None:
        h.layout.filter(rows)

    def join(self, h: Handle, other: Handle) -> None:
        h.layout.join(other.layout)

    def extract(self, h: Handle, row: int) -> Handle:
        return Handle(h.layout.extract(row), h.contents)

    def save(self, h: Handle) -> bytes:
        return _core.encode_layout(h.layout)

    def load(self, data: bytes, like: Handle) -> Handle:
        layout = _core.decode_layout(data)
        layout.reference_kernels = self.reference_kernels
        return Handle(layout, like.contents)

    def reload(self, h: Handle) -> Handle:
        loaded = self.load(self.save(h), h)
        # A reload changes the layout: no bypass trim after it (TRACE.md rule 3).
        loaded.layout.forget_bypass_bound()
        return loaded

    def positions(self, h: Handle) -> List[int]:
        return h.layout.positions()

    def trimmable(self, h: Handle, layer: int) -> bool:
        return h.layout.trimmable(layer)

    def kind(self, h: Handle, layer: int) -> str:
        return h.layout.kind(layer)

    def bytes_per_token(self, h: Handle, layer: int) -> int:
        return h.layout.bytes_per_token(layer)

    def difference(self, a: Handle, b: Handle) -> Optional[str]:
        return a.layout.difference(b.layout) or None
