"""A deliberately naive ring, as several engines' rings were: once the ring
has wrapped, trim only moves the counters (positions and columns) back --
the rejected tips stay in storage, visible to the next queries beside the
tokens rewritten at their positions, and a trim that should be refused goes
through. Everything else is numpy_cache. The conformance runner must catch
it on the ring traces (tests/test_conform.py), each failure naming its line.
"""

from ..errors import Refused
from . import numpy_cache


class Adapter(numpy_cache.Adapter):
    name = "naive_ring"

    def trim(self, c, n, bypass):
        if any(c.wrapped(layer) for layer in c.layers):
            if c.armed:
                raise Refused("trim while a round is armed")
            self._move_counters(c, [n] * c.rows)
            return
        super().trim(c, n, bypass)

    def accept(self, c, keep):
        if c.armed and c.verified and any(c.wrapped(layer) for layer in c.layers):
            for r, k in enumerate(keep):
                if k > c.verify_real[r]:
                    raise Refused("accept %d: row %d has only %d tokens" % (
                        k, r, c.verify_real[r]))
            self._move_counters(c, [r - k for r, k in zip(c.verify_real, keep)])
            c.armed = c.verified = False
            c.bypass_bound = None
            return
        super().accept(c, keep)

    @staticmethod
    def _move_counters(c, drop):
        for r in range(c.rows):
            c.next[r] -= drop[r]
        c.columns -= min(drop)
        c.bypass_bound = None
