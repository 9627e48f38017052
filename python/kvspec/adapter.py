"""The adapter protocol: how the conformance runner drives an engine's cache.

An engine plugs into ``python3 -m kvspec.conform --adapter MODULE[:CLASS]``
by subclassing :class:`Adapter` (``MODULE`` alone means ``MODULE:Adapter``).
The runner reads a trace (TRACE.md) and calls these methods; it keeps the
trace's own bookkeeping itself (the names of layouts, which one is current,
the last forward of each, list lengths against rows), so an adapter only
models its cache.

Handles. :meth:`create` returns a *handle*: any object standing for one
layout (a model's list of layer caches). Every operation takes a handle.
An operation that changes the layout may change the handle in place and
return ``None``, or return a new handle that replaces it (whatever suits the
engine: immutable caches return new ones).

Refusals. An operation the cache refuses raises :class:`kvspec.Refused`
(any message) and must leave the layout unchanged; the runner checks both
against the trace's ``expect error`` lines (and against kvspec's core).

Not applicable. A statement the engine cannot express raises
:class:`kvspec.NotApplicable` with a reason: the trace is then reported as
``not applicable: <reason>``, never silently skipped.

Settings. The runner's ``--setting KEY=VALUE`` options reach
:meth:`Adapter.configure` as a dict of strings, once, before any other
call. An engine in another language runs as its own process instead
(``--adapter-command``, kvspec.process, docs/adapter-protocol.md).

Layers. ``layers`` is a list of :class:`kvspec.program.Layer`: ``name``,
``kind`` ("kv", "rotating" or "ssm"), ``heads``, ``qheads``, ``dim``,
``window`` (0: none), ``capacity`` (a ring's; = window when not given),
``kheads``, ``dk``, ``dv``, ``conv``. Layers are referred to by index.

Token contents. A token is (layer, id, pos); :mod:`kvspec.values` gives the
exact fp32 contents TRACE.md "Values" fixes, so that an engine can also
produce comparable outputs. An adapter that only tracks which tokens each
query admitted is fine: it returns no outputs, and a trace with
``expect out`` lines is then not applicable to it.
"""

from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from .errors import NotApplicable as NotApplicable, Refused as Refused  # for adapters
from .program import Layer, SeenItem

#: A seen item: ``(pos, id)`` of a stored token, or "pad", "zero", "junk".
Item = SeenItem
#: ``(layer, row, pos)`` of a query.
QueryKey = Tuple[int, int, int]
#: A layout as the adapter represents it (any object; see "Handles").
Handle = Any


class ForwardResult:
    """What one forward observed.

    ``seen``: dict ``(layer, row, pos) -> list of (pos, id)``, for every
    attention layer, row and real query of the forward: the stored tokens the
    query attended to (in any order). An adapter that recovers them from its
    storage (as it should: TRACE.md "Output") may also report admitted slots
    that hold no written token as the strings "pad", "zero" or "junk".

    ``out``: ``None``, or dict ``(layer, row, pos) -> sequence of floats``:
    the query's attention output (all query heads, head-major) or, for a
    recurrent layer, the token's y (all value heads).
    """

    def __init__(self, seen: Dict[QueryKey, List[Item]],
                 out: Optional[Mapping[QueryKey, Sequence[float]]] = None) -> None:
        self.seen = seen
        self.out = out


class Adapter:
    """Base class of adapters. Override every method your engine supports;
    the defaults raise :class:`NotApplicable` (and ``reload`` goes through
    :meth:`save` and :meth:`load`)."""

    #: A short name for reports.
    name: str = "adapter"

    #: Observations the engine does not have, from "kind", "trimmable",
    #: "bytes_per_token" and "out" (an engine that is not kvspec has no
    #: kvspec cache kinds; a probe model computes no trace values). The
    #: runner neither calls nor compares them, and counts each ``expect``
    #: line of them as not compared ("pass FILE (not compared: ...)")
    #: instead of checking it. Refusals, what queries saw, positions and
    #: ``expect equal`` are always compared.
    unobserved: FrozenSet[str] = frozenset()

    def configure(self, settings: Mapping[str, str]) -> Dict[str, str]:
        """The runner's ``--setting KEY=VALUE`` options (values are strings),
        given once before any other call. Returns the settings in effect
        (defaults included, for reports); raises ValueError for an unknown
        key or a bad value. This default takes no settings."""
        if settings:
            raise ValueError("%s takes no settings (got %s)" % (
                self.name, ", ".join(sorted(settings))))
        return {}

    # -- construction -------------------------------------------------------
    def create(self, rows: int, layers: List[Layer]) -> Handle:
        """A new layout of ``rows`` batch rows with these layers (the trace
        header). Returns its handle. Raise NotApplicable for a layer kind or
        shape the engine does not have."""
        raise NotApplicable("%s: create is not implemented" % self.name)

    # -- forwards -----------------------------------------------------------
    def forward(self, cache: Handle, columns: int, ids: List[List[int]],
                positions: List[List[int]], left: List[int], right: List[int],
                decode: bool) -> ForwardResult:
        """One forward of ``columns`` (L) new columns in every row.

        ``left[r]`` leading pad columns (only while row r holds no token),
        ``right[r]`` trailing pad columns; the real tokens of row r are the
        columns ``left[r] .. L - right[r] - 1``, with ids ``ids[r]`` and
        positions ``positions[r]`` (consecutive, from the row's next
        position). ``decode`` is True for a ``decode`` (L = 1, no pads).
        Refuse (raise Refused) what the cache refuses, e.g. left padding on a
        non-empty row or a second forward in an armed round. Returns a
        :class:`ForwardResult`."""
        raise NotApplicable("%s: forward is not implemented" % self.name)

    def trim(self, cache: Handle, n: int, bypass: bool) -> Optional[Handle]:
        """Drop the last ``n`` real tokens of every row in every layer.
        Without ``bypass``: refused unless every layer is trimmable. With
        ``bypass``: the speculative rollback right after a window (TRACE.md
        precise rule 3)."""
        raise NotApplicable("%s: trim is not implemented" % self.name)

    # -- speculative rounds ---------------------------------------------------
    def arm(self, cache: Handle) -> Optional[Handle]:
        """Begin a speculative round (the next forward is the verify one)."""
        raise NotApplicable("%s: rounds are not implemented" % self.name)

    def accept(self, cache: Handle, keep: List[int]) -> Optional[Handle]:
        """End the round: row r keeps the first ``keep[r]`` real tokens of the
        verify forward (``keep`` has one value per row). The engine's
        rollback: drop the rest, or restore and replay."""
        raise NotApplicable("%s: rounds are not implemented" % self.name)

    # -- lifecycle ------------------------------------------------------------
    def fork(self, cache: Handle) -> Handle:
        """A deep copy (a new, independent handle)."""
        raise NotApplicable("%s: fork is not implemented" % self.name)

    def filter(self, cache: Handle, rows: List[int]) -> Optional[Handle]:
        """Keep only ``rows`` (ascending, existing), renumbered from 0."""
        raise NotApplicable("%s: filter is not implemented" % self.name)

    def join(self, cache: Handle, other: Handle) -> Optional[Handle]:
        """Append ``other``'s rows after ``cache``'s; ``other`` is unchanged."""
        raise NotApplicable("%s: join is not implemented" % self.name)

    def extract(self, cache: Handle, row: int) -> Handle:
        """Row ``row`` as a new one-row layout; returns its handle."""
        raise NotApplicable("%s: extract is not implemented" % self.name)

    def save(self, cache: Handle) -> bytes:
        """The layout as bytes (the engine's persistence)."""
        raise NotApplicable("%s: save is not implemented" % self.name)

    def load(self, data: bytes, like: Handle) -> Handle:
        """The layout ``save`` wrote, as a new handle. ``like`` is the handle
        that was saved (for engines that need the model's shapes)."""
        raise NotApplicable("%s: load is not implemented" % self.name)

    def reload(self, cache: Handle) -> Handle:
        """``reload``: save, then load. Returns the new handle. Afterwards a
        bypass trim is refused (TRACE.md precise rule 3)."""
        return self.load(self.save(cache), cache)

    # -- observation ------------------------------------------------------------
    def positions(self, cache: Handle) -> List[int]:
        """Each row's next position (its real token count), a list."""
        raise NotApplicable("%s: positions is not implemented" % self.name)

    def trimmable(self, cache: Handle, layer: int) -> bool:
        """Whether layer ``layer`` can trim (isTrimmable)."""
        raise NotApplicable("%s: trimmable is not implemented" % self.name)

    def kind(self, cache: Handle, layer: int) -> str:
        """The layer cache's stable kind string ("kv", "batched_rotating", ...)."""
        raise NotApplicable("%s: kind is not implemented" % self.name)

    def bytes_per_token(self, cache: Handle, layer: int) -> int:
        """Physical bytes one more token costs one row."""
        raise NotApplicable("%s: bytes_per_token is not implemented" % self.name)

    def difference(self, a: Handle, b: Handle) -> Optional[str]:
        """``None`` when layouts ``a`` and ``b`` are equal in everything
        observable (TRACE.md precise rule 9: rows, positions, per kv layer
        every committed token, per ring the last min(count, window - 1), per
        ssm layer the states), else a short description of the first
        difference. Used for ``expect equal`` and to check that a refused
        operation changed nothing."""
        raise NotApplicable("%s: state comparison is not implemented" % self.name)
