"""kvspec's own core as an adapter: what the runner compares every engine with.

Each handle holds a ``kvspec.Layout`` and the trace's token contents
(``kvspec.TraceContents``: one per trace, shared by every layout forked or
extracted from it, since contents depend on (layer, id, pos) only). Forwards
write TRACE.md's contents and read back what each query saw from the bytes
stored in the slots the layout's mask admits (``kvspec.trace_forward``).
"""

from .. import _core
from ..adapter import Adapter as Base, ForwardResult


class Handle:
    def __init__(self, layout, contents):
        self.layout = layout
        self.contents = contents


class Adapter(Base):
    name = "reference"

    def __init__(self, reference_kernels=False):
        self.reference_kernels = reference_kernels

    def create(self, rows, layers):
        configs = [_core.LayerConfig(
            l.name, l.kind, heads=l.heads, q_heads=l.qheads, dim=l.dim, window=l.window,
            capacity=l.capacity, kheads=l.kheads, dk=l.dk, dv=l.dv, conv=l.conv)
            for l in layers]
        layout = _core.Layout(rows, configs)
        layout.reference_kernels = self.reference_kernels
        return Handle(layout, _core.TraceContents())

    def forward(self, h, columns, ids, positions, left, right, decode):
        seen, out = _core.trace_forward(h.layout, h.contents, columns, left, right, ids, decode)
        return ForwardResult(seen, out)

    def trim(self, h, n, bypass):
        h.layout.trim(n, bypass)

    def arm(self, h):
        h.layout.arm()

    def accept(self, h, keep):
        h.layout.accept(keep)

    def fork(self, h):
        return Handle(h.layout.copy(), h.contents)

    def filter(self, h, rows):
        h.layout.filter(rows)

    def join(self, h, other):
        h.layout.join(other.layout)

    def extract(self, h, row):
        return Handle(h.layout.extract(row), h.contents)

    def save(self, h):
        return _core.encode_layout(h.layout)

    def load(self, data, like):
        layout = _core.decode_layout(data)
        layout.reference_kernels = self.reference_kernels
        return Handle(layout, like.contents)

    def reload(self, h):
        loaded = self.load(self.save(h), h)
        # A reload changes the layout: no bypass trim after it (TRACE.md rule 3).
        loaded.layout.forget_bypass_bound()
        return loaded

    def positions(self, h):
        return h.layout.positions()

    def trimmable(self, h, layer):
        return h.layout.trimmable(layer)

    def kind(self, h, layer):
        return h.layout.kind(layer)

    def bytes_per_token(self, h, layer):
        return h.layout.bytes_per_token(layer)

    def difference(self, a, b):
        return a.layout.difference(b.layout) or None
