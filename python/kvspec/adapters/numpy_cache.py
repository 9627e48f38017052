"""A small pure-numpy cache, written from DESIGN.md and TRACE.md the way an
engine author would write one: plain KV layers, sliding-window rings with
capacity >= window, batches with left padding and prepared (right) padding,
speculative rounds, filter/join/extract and pickle persistence. Recurrent
(ssm) layers are not implemented: a trace with one is not applicable.

Storage, per attention layer: arrays over (row, column) in logical order,
pads included -- the token's position (-1: pad or dropped), its id and its
k and v. Before each forward a ring drops its oldest columns beyond its
capacity, but never one that a later query can still see (a row's last
window - 1 real tokens; all of them while the row holds at most the
capacity); so after a verify window, a bypass trim or an accept leaves the
ring as if only the accepted tokens had been written. Attention reads only
what is stored: the query at position p admits the stored tokens of its
row at positions p - window + 1 .. p.
"""

import copy
import pickle

from typing import Any, Dict, List

import numpy as np
import numpy.typing as npt

from .. import values
from ..adapter import Adapter as Base, ForwardResult, Item, QueryKey
from ..errors import NotApplicable, Refused

MAX_TOKENS_PER_ROW = 1000000


class Layer:
    """One attention layer's storage (see the module comment)."""

    def __init__(self, index, spec, rows):
        self.index = index
        self.name = spec.name
        self.ring = spec.kind == "rotating"
        self.window = spec.window
        self.capacity = (spec.capacity or spec.window) if self.ring else 0
        self.heads, self.qheads, self.dim = spec.heads, spec.qheads or spec.heads, spec.dim
        self.kv = spec.kv  # storage type: keys and values are kept as they read back
        hd = self.heads * self.dim
        self.pos: npt.NDArray[Any] = np.zeros((rows, 0), np.int32)
        self.ids: npt.NDArray[Any] = np.zeros((rows, 0), np.int32)
        self.k: npt.NDArray[Any] = np.zeros((rows, 0, hd), np.float32)
        self.v: npt.NDArray[Any] = np.zeros((rows, 0, hd), np.float32)

    def append(self, pos, ids, k, v):
        self.pos = np.concatenate([self.pos, pos], axis=1)
        self.ids = np.concatenate([self.ids, ids], axis=1)
        self.k = np.concatenate([self.k, k], axis=1)
        self.v = np.concatenate([self.v, v], axis=1)

    def keep_columns(self, sl):
        self.pos, self.ids, self.k, self.v = (a[:, sl] for a in (self.pos, self.ids, self.k, self.v))

    def select_rows(self, rows):
        self.pos, self.ids, self.k, self.v = (a[rows] for a in (self.pos, self.ids, self.k, self.v))

    def pad_front(self, n):
        if n <= 0:
            return
        r = self.pos.shape[0]
        hd = self.k.shape[2]
        self.pos = np.concatenate([np.full((r, n), -1, np.int32), self.pos], axis=1)
        self.ids = np.concatenate([np.full((r, n), -1, np.int32), self.ids], axis=1)
        self.k = np.concatenate([np.zeros((r, n, hd), np.float32), self.k], axis=1)
        self.v = np.concatenate([np.zeros((r, n, hd), np.float32), self.v], axis=1)

    def drop_last_real(self, row, n):
        """Invalidates row's last n real tokens."""
        if n <= 0:
            return
        real = np.nonzero(self.pos[row] >= 0)[0]
        self.pos[row, real[len(real) - n:]] = -1

    def evict(self):
        """A ring drops its oldest columns beyond its capacity, but keeps all
        of a row's real tokens while it holds at most the capacity (so that an
        extracted row is still trimmable) and otherwise its last window - 1.
        Called before a forward: until the next one, the columns a bypass
        trim may bring back into the ring stay held."""
        if not self.ring:
            return
        held = self.pos.shape[1]
        drop = held - self.capacity
        for row in range(self.pos.shape[0]):
            real = np.nonzero(self.pos[row] >= 0)[0]
            if len(real) == 0:
                continue
            if len(real) <= self.capacity:
                drop = min(drop, int(real[0]))
            elif self.window > 1:
                drop = min(drop, int(real[len(real) - (self.window - 1)]))
        if drop > 0:
            self.keep_columns(slice(drop, None))


class Cache:
    """One layout: the layers plus the column model and round state."""

    def __init__(self, rows, specs):
        self.rows = rows
        self.specs = specs
        self.batched = rows > 1
        self.layers = [Layer(i, s, rows) for i, s in enumerate(specs)]
        self.next = [0] * rows
        self.columns = 0
        self.peak = 0
        self.armed = False
        self.verified = False
        self.verify_real = None
        self.peak_before_verify = 0
        self.peak_before_forward = 0
        self.bypass_bound = None  # real counts of the last change, when it was a window

    def wrapped(self, layer):
        return layer.ring and self.peak > layer.capacity


class Adapter(Base):
    name = "numpy_cache"

    # -- construction -----------------------------------------------------------
    def create(self, rows, layers):
        for spec in layers:
            if spec.kind == "ssm":
                raise NotApplicable("numpy_cache has no recurrent (ssm) layers")
        return Cache(rows, layers)

    # -- forwards -------------------------------------------------------------------
    def forward(self, c, columns, ids, positions, left, right, decode):
        rows = c.rows
        if c.armed and c.verified:
            raise Refused("a second forward while a round is armed")
        for r in range(rows):
            if left[r] and c.next[r]:
                raise Refused("row %d: left padding on a row that holds tokens" % r)
            if c.next[r] + len(ids[r]) > MAX_TOKENS_PER_ROW:
                raise Refused("row %d: too many tokens" % r)
        seen: Dict[QueryKey, List[Item]] = {}
        out: Dict[QueryKey, Any] = {}
        for layer in c.layers:
            layer.evict()
            hd = layer.heads * layer.dim
            pos = np.full((rows, columns), -1, np.int32)
            idv = np.full((rows, columns), -1, np.int32)
            k = np.zeros((rows, columns, hd), np.float32)
            v = np.zeros((rows, columns, hd), np.float32)
            q = {}
            for r in range(rows):
                for j, (p, ident) in enumerate(zip(positions[r], ids[r])):
                    col = left[r] + j
                    qq, kk, vv = values.attention_token(layer.index, ident, p, layer.heads,
                                                        layer.qheads, layer.dim)
                    kk, vv = (values.stored(layer.kv, x, layer.dim) for x in (kk, vv))
                    pos[r, col], idv[r, col], k[r, col], v[r, col] = p, ident, kk, vv
                    q[(r, p)] = qq
            layer.append(pos, idv, k, v)
            for (r, p), qq in q.items():
                lo = 0 if not layer.window else max(0, p - layer.window + 1)
                admitted = np.nonzero((layer.pos[r] >= lo) & (layer.pos[r] <= p))[0]
                seen[(layer.index, r, p)] = [(int(layer.pos[r, s]), int(layer.ids[r, s]))
                                             for s in admitted]
                out[(layer.index, r, p)] = attend(qq, layer.k[r, admitted], layer.v[r, admitted],
                                                  layer.heads, layer.qheads, layer.dim)
        for r in range(rows):
            c.next[r] += len(ids[r])
        if c.armed:
            c.verified = True
            c.verify_real = [len(g) for g in ids]
            c.peak_before_verify = c.peak
        c.peak_before_forward = c.peak
        c.columns += columns
        c.peak = max(c.peak, c.columns)
        # Only a window bounds a bypass trim (a decode does not).
        c.bypass_bound = None if decode else [len(g) for g in ids]
        return ForwardResult(seen, out)

    # -- trims and rounds ---------------------------------------------------------
    def trim(self, c, n, bypass):
        if c.armed:
            raise Refused("trim while a round is armed")
        if bypass:
            if c.bypass_bound is None or any(n > b for b in c.bypass_bound):
                raise Refused("trim %d bypass: not right after a window of >= %d tokens" % (n, n))
            self._drop_tips(c, [n] * c.rows, c.peak_before_forward)
        else:
            for layer in c.layers:
                if c.wrapped(layer):
                    raise Refused("layer '%s' is not trimmable (the ring has wrapped)" % layer.name)
            for r in range(c.rows):
                if c.next[r] < n:
                    raise Refused("trim %d: row %d holds only %d tokens" % (n, r, c.next[r]))
            self._drop_tips(c, [n] * c.rows, c.peak)
        c.bypass_bound = None

    def _drop_tips(self, c, drop, peak):
        """Drops each row's last drop[r] real tokens; the columns shrink by
        the smallest drop (the other rows' dropped tokens become holes)."""
        cut = min(drop)
        for layer in c.layers:
            for r in range(c.rows):
                layer.drop_last_real(r, drop[r])
            if cut:
                layer.keep_columns(slice(0, layer.pos.shape[1] - cut))
        for r in range(c.rows):
            c.next[r] -= drop[r]
        c.columns -= cut
        c.peak = max(peak, c.columns)

    def arm(self, c):
        if c.armed:
            raise Refused("arm: a round is already armed")
        c.armed, c.verified, c.bypass_bound = True, False, None

    def accept(self, c, keep):
        if not c.armed:
            raise Refused("accept without arm")
        if not c.verified:
            raise Refused("accept before the verify forward")
        for r, k in enumerate(keep):
            if k > c.verify_real[r]:
                raise Refused("accept %d: row %d has only %d tokens in the round" % (
                    k, r, c.verify_real[r]))
        self._drop_tips(c, [n - k for n, k in zip(c.verify_real, keep)], c.peak_before_verify)
        c.armed = c.verified = False
        c.bypass_bound = None

    # -- lifecycle ------------------------------------------------------------------
    def fork(self, c):
        return copy.deepcopy(c)

    def filter(self, c, rows):
        if c.armed:
            raise Refused("filter while a round is armed")
        for layer in c.layers:
            layer.select_rows(rows)
        c.next = [c.next[r] for r in rows]
        c.rows = len(rows)
        c.bypass_bound = None

    def join(self, c, other):
        if c.armed or other.armed:
            raise Refused("join while a round is armed")
        if [_shape(s) for s in c.specs] != [_shape(s) for s in other.specs]:
            raise Refused("join: the layer lists differ")
        o = copy.deepcopy(other)
        for a, b in zip(c.layers, o.layers):
            n = max(a.pos.shape[1], b.pos.shape[1])
            a.pad_front(n - a.pos.shape[1])
            b.pad_front(n - b.pos.shape[1])
            a.pos, a.ids = np.concatenate([a.pos, b.pos]), np.concatenate([a.ids, b.ids])
            a.k, a.v = np.concatenate([a.k, b.k]), np.concatenate([a.v, b.v])
        c.next = c.next + o.next
        c.rows += o.rows
        c.columns = max(c.columns, o.columns)
        c.peak = max(c.peak, o.peak)
        c.batched = True
        c.bypass_bound = None

    def extract(self, c, row):
        if c.armed:
            raise Refused("extract while a round is armed")
        e = Cache(1, c.specs)
        for a, b in zip(e.layers, c.layers):
            held = np.nonzero(b.pos[row] >= 0)[0]
            a.pos, a.ids = b.pos[row:row + 1, held], b.ids[row:row + 1, held]
            a.k, a.v = b.k[row:row + 1, held], b.v[row:row + 1, held]
        e.next = [c.next[row]]
        e.columns = c.next[row]
        # A row fed only its own tokens has wrapped when the batch's ring did
        # and it holds more than the capacity.
        e.peak = max(e.columns, min(c.peak, c.next[row]))
        return e

    def save(self, c):
        return pickle.dumps(c)

    def load(self, data, like):
        c = pickle.loads(data)
        c.bypass_bound = None
        return c

    # -- observation --------------------------------------------------------------
    def positions(self, c):
        return list(c.next)

    def trimmable(self, c, layer):
        return not c.wrapped(c.layers[layer])

    def kind(self, c, layer):
        base = "rotating" if c.layers[layer].ring else "kv"
        return "batched_" + base if c.batched else base

    def bytes_per_token(self, c, layer):
        lay = c.layers[layer]
        return lay.heads * 2 * values.row_bytes(lay.kv, lay.dim)

    def difference(self, a, b):
        if a.rows != b.rows:
            return "rows %d vs %d" % (a.rows, b.rows)
        if a.next != b.next:
            return "positions %s vs %s" % (a.next, b.next)
        for la, lb in zip(a.layers, b.layers):
            for r in range(a.rows):
                keep = a.next[r]
                if la.ring:
                    keep = min(keep, la.window - 1)
                ta, tb = _committed(la, r, keep), _committed(lb, r, keep)
                if ta != tb:
                    return "layer %s row %d differs" % (la.name, r)
        return None


def _shape(spec):
    return (spec.kind, spec.heads, spec.qheads, spec.dim, spec.window, spec.capacity)


def _committed(layer, row, keep):
    real = np.nonzero(layer.pos[row] >= 0)[0]
    real = real[len(real) - keep:] if keep else real[:0]
    return [(int(layer.pos[row, s]), int(layer.ids[row, s]), layer.k[row, s].tobytes(),
             layer.v[row, s].tobytes()) for s in real]


def attend(q, k, v, heads, qheads, dim):
    """softmax((q . k) / sqrt(dim)) v per query head; zeros when nothing is seen."""
    out = np.zeros(qheads * dim, np.float64)
    if len(k) == 0:
        return out
    group = qheads // heads
    for hq in range(qheads):
        h = hq // group
        qh = q[hq * dim:(hq + 1) * dim].astype(np.float64)
        kh = k[:, h * dim:(h + 1) * dim].astype(np.float64)
        vh = v[:, h * dim:(h + 1) * dim].astype(np.float64)
        s = kh @ qh / np.sqrt(dim)
        w = np.exp(s - s.max())
        out[hq * dim:(hq + 1) * dim] = (w / w.sum()) @ vh
    return out
