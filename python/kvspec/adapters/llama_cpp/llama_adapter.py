"""The llama.cpp adapter: trace layouts as llama.cpp contexts of the probe
models (see the package's docstring and docs/engines/llama.cpp.md)."""

import ctypes
import gc
import os
import pickle
import weakref
from typing import Any, Dict, List, Tuple

import numpy as np

from ...adapter import Adapter as Base, ForwardResult
from ...errors import NotApplicable, Refused
from . import state_layout
from .engine import ARENA_CELLS, ARENA_SEQS, CACHE_TYPES, CELLS_PER_SEQ, LABELS, POOL_PER_SHAPE, \
    PROBE, QUANT_BLOCK, RECURRENT_VOCAB, STATE_TOLERANCE, Engine, quantized, settings


# With a quantized V cache, a label is seen when its entry exceeds this
# fraction of the block's largest. Every admitted cell gets the same weight,
# and its rotated one-hot value row has 32 equal magnitudes per block, which
# q8_0 stores exactly up to the fp16 block scale (relative 2^-11, the same
# for every row): seen labels come out equal, unseen ones as the rotation's
# float round-off (at most 2.1e-7 of the largest over 500 cells).
SEEN_CUTOFF = 0.5


class _Labels:
    """label -> (pos, id), shared by every layout of one trace run."""

    def __init__(self):
        self.items = {}
        self.next = PROBE + 1

    def new(self, pos, ident):
        if self.next >= LABELS:
            raise NotApplicable("the trace writes more than %d tokens (the probe model's "
                                "vocabulary)" % (LABELS - 1))
        label = self.next
        self.next += 1
        self.items[label] = (pos, ident)
        return label


class _Model:
    """One probe model standing for some of the trace's layers.

    ``blocks``: trace layer index -> embedding block of its model layer (an
    attention probe); ``recurrent``: the qwen35 probe (no blocks)."""

    def __init__(self, engine, model, n_embd, blocks, recurrent, labels, settings_):
        self.engine = engine
        self.model = model
        self.n_embd = n_embd
        self.blocks = blocks
        self.recurrent = recurrent
        self.labels = labels
        self.settings = settings_
        self.scratch = None
        self.arena = None


def _context(m: _Model, n_ctx: int, n_seq: int) -> Any:
    """A new llama.cpp context of probe model m, with the run's settings."""
    s = m.settings
    # read by llama.cpp when it creates a context's KV cache
    os.environ["LLAMA_ATTN_ROT_DISABLE"] = "0" if s["attn_rot"] else "1"
    ctx = m.engine.lib.kvl_context(m.model, n_ctx, n_seq, max(256, s["n_ubatch"]), s["n_ubatch"],
                                   s["swa_full"], s["kv_unified"], s["n_rs_seq"],
                                   CACHE_TYPES[s["type_k"]], CACHE_TYPES[s["type_v"]],
                                   s["flash_attn"])
    if not ctx:
        raise RuntimeError("llama_init_from_model failed (type_k=%s, type_v=%s, flash_attn=%d; "
                           "run with --setting verbose=1 for llama.cpp's reason)" % (
                               s["type_k"], s["type_v"], s["flash_attn"]))
    return ctx


class _Arena:
    """seq_cp=1: one context per probe model holding every layout's rows as
    sequences; fork, filter, join and extract are llama_memory_seq_cp, not
    state copies."""

    def __init__(self, m):
        self.lib = m.engine.lib
        self.ctx = _context(m, ARENA_CELLS, ARENA_SEQS)
        self.free = list(range(ARENA_SEQS - 1, -1, -1))

    def alloc(self, n):
        if len(self.free) < n:
            gc.collect()
        if len(self.free) < n:
            raise NotApplicable("more than %d live sequences (seq_cp=1)" % ARENA_SEQS)
        return [self.free.pop() for _ in range(n)]

    @staticmethod
    def release(arena, seqs):
        for q in seqs:
            arena.lib.kvl_seq_rm(arena.ctx, q, -1, -1)
            arena.free.append(q)


class _Part:
    """One llama.cpp context (of one probe model) whose sequence r is row r."""

    live = 0   # contexts not yet freed
    pool: Dict[Tuple[Any, ...], List[Any]] = {}  # (model, n_seq, settings) -> freed contexts

    def __init__(self, m, rows):
        # Contexts are freed with their handle; handles in reference cycles
        # (the runner's closures) wait for Python's cycle collector, which
        # does not see the contexts' memory: collect when many are alive.
        if _Part.live > 64:
            gc.collect()
        self.m = m
        lib = m.engine.lib
        s = m.settings
        # recurrent: rows whose partial rollback (seq_rm) is pending, i.e. not
        # yet consumed by a decode of the row (see rm_refusal)
        self.pending = set()
        if s["seq_cp"] and not m.recurrent:  # recurrent contexts keep state copies
            if m.arena is None:
                # one arena per probe model and process, shared by trace runs
                arena_key = (m.model, tuple(sorted(s.items())))
                if arena_key not in m.engine.arenas:
                    m.engine.arenas[arena_key] = _Arena(m)
                m.arena = m.engine.arenas[arena_key]
            self.arena = m.arena
            self.ctx = m.arena.ctx
            self.seqs = m.arena.alloc(rows)
            self._fin = weakref.finalize(self, _Arena.release, m.arena, list(self.seqs))
            return
        self.arena = None
        self.seqs = list(range(rows))
        self.n_seq = max(rows, s["n_seq_max"])
        if self.n_seq > 64:
            raise NotApplicable("more than 64 sequences")
        # A context freed by an earlier layout of the same shape is reused,
        # emptied with llama_memory_clear(mem, true) (cells, positions,
        # rollback indices and the buffers' data): creating a context
        # (buffers, graph reservation) was a third of a random run's time.
        # pool=0 in the settings creates every context afresh.
        key = (m.model, self.n_seq, tuple(sorted(s.items())))
        free = _Part.pool.get(key)
        if s["pool"] and free:
            self.ctx = free.pop()
            lib.kvl_clear(self.ctx)
        else:
            self.ctx = _context(m, CELLS_PER_SEQ * self.n_seq, self.n_seq)
        _Part.live += 1
        self._fin = weakref.finalize(self, _Part._free, lib, self.ctx,
                                     key if s["pool"] else None)

    @staticmethod
    def _free(lib, ctx, key):
        _Part.live -= 1
        free = _Part.pool.setdefault(key, []) if key is not None else None
        if free is not None and len(free) < POOL_PER_SHAPE:
            free.append(ctx)
        else:
            lib.kvl_free(ctx)

    def positions(self, rows):
        lib = self.m.engine.lib
        return [lib.kvl_seq_pos_max(self.ctx, self.seqs[r]) + 1 for r in range(rows)]

    def rm_refusal(self, r, p0):
        """Why a recurrent context's llama_memory_seq_rm(seq r, p0, -1) would
        return false, or None: llama_memory_recurrent::seq_rm (v0.4.0)
        refuses a partial removal (0 < p0 <= the sequence's last position)
        unless it rolls back 1..n_rs_seq tokens and no earlier rollback of
        the sequence is still pending (a rollback is consumed by the next
        decode of the sequence; a state restore or a full removal drops
        it). p0 <= 0 (a full removal) and p0 past the end are accepted."""
        last = self.m.engine.lib.kvl_seq_pos_max(self.ctx, self.seqs[r])
        if not 0 < p0 <= last:
            return None
        if r in self.pending:
            return "a rollback is pending since the last decode"
        rollback = last - p0 + 1
        if rollback > self.m.settings["n_rs_seq"]:
            return "a rollback of %d tokens, n_rs_seq is %d" % (rollback,
                                                                 self.m.settings["n_rs_seq"])
        return None

    def state(self, r):
        lib = self.m.engine.lib
        n = lib.kvl_state_size(self.ctx, self.seqs[r])
        buf = ctypes.create_string_buffer(n)
        got = lib.kvl_state_get(self.ctx, buf, n, self.seqs[r])
        if got != n:
            raise RuntimeError("llama_state_seq_get_data wrote %d of %d bytes" % (got, n))
        return buf.raw

    def set_state(self, r, data):
        self.pending.discard(r)  # state_read resets the sequence's rollback index
        got = self.m.engine.lib.kvl_state_set(self.ctx, data, len(data), self.seqs[r])
        if got == 0:
            raise RuntimeError("llama_state_seq_set_data refused %d bytes for seq %d" % (len(data), r))


class Layout:
    """One layout: a context per probe model; row r is sequence r in each."""

    def __init__(self, models, rows):
        self.models = models
        self.rows = rows
        self.parts = [_Part(m, rows) for m in models]
        self.armed = False
        self.verify_start = None

    def positions(self):
        """Each row's llama_memory_seq_pos_max + 1; with several contexts
        (parts) the largest (they agree unless a cache lost positions)."""
        per = [p.positions(self.rows) for p in self.parts]
        return [max(col) for col in zip(*per)]


def _float_note(a, b):
    """How far two equally long states are apart, read as float32."""
    if len(a) != len(b) or len(a) % 4:
        return ""
    x = np.frombuffer(a, np.float32).astype(np.float64)
    y = np.frombuffer(b, np.float32).astype(np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    d = np.abs(x[ok] - y[ok])
    ne = np.frombuffer(a, np.uint32) != np.frombuffer(b, np.uint32)
    return ", %d of %d words differ, max |diff| %.3g" % (int(np.sum(ne)), len(x),
                                                         float(d.max()) if len(d) else 0.0)


class Adapter(Base):
    name = "llama.cpp"
    # llama.cpp has no notion of kvspec's cache kinds, trimmability or bytes
    # per token, and the probe models compute no trace values.
    unobserved = frozenset(["kind", "trimmable", "bytes_per_token", "out"])

    def __init__(self):
        self.settings = settings()
        self._engine = None

    def configure(self, given):
        """The runner's --setting options (see the package's docstring);
        loads llama.cpp, so that a missing engine shows before any trace."""
        self.settings = settings(given)
        _ = self.engine
        return {k: str(v) for k, v in self.settings.items()}

    @property
    def engine(self):
        if self._engine is None:
            self._engine = Engine.get(self.settings["verbose"])
        return self._engine

    # -- construction -------------------------------------------------------
    def create(self, rows, layers):
        """Groups the trace's layers into probe models: the windowless kv
        layers and the layers of the first window share one gemma3 model
        (full + SWA layers: llama.cpp's iswa cache); every further window
        gets a gemma3 SWA model; the ssm layers of each conv kernel a qwen35
        gated DeltaNet model."""
        labels = _Labels()
        eng = self.engine
        windows = []
        for l in layers:
            if l.kind != "ssm" and l.window and l.window not in windows:
                windows.append(l.window)
        full = [i for i, l in enumerate(layers) if l.kind != "ssm" and not l.window]
        models = []
        groups = [(windows[0] if windows else 0, True)] + [(w, False) for w in windows[1:]]
        for w, with_full in groups:
            swa = [i for i, l in enumerate(layers) if l.kind != "ssm" and w and l.window == w]
            fl = full if with_full else []
            if not swa and not fl:
                continue
            ml = (["swa"] if swa else []) + (["full"] if fl else [])
            model, n_embd = eng.model(ml, w)
            blocks = {i: ml.index("swa") + 1 for i in swa}
            blocks.update({i: ml.index("full") + 1 for i in fl})
            models.append(_Model(eng, model, n_embd, blocks, False, labels, self.settings))
        convs = []
        for l in layers:
            if l.kind == "ssm" and l.conv not in convs:
                convs.append(l.conv)
        s = self.settings
        head_dim = QUANT_BLOCK if quantized(s["type_k"]) or quantized(s["type_v"]) else 16
        for c in convs:
            model, n_embd = eng.recurrent_model(c, head_dim)
            models.append(_Model(eng, model, n_embd, {}, True, labels, self.settings))
        return Layout(models, rows)

    # -- forwards -----------------------------------------------------------
    def _decode(self, part, tokens, pos, seq):
        n = len(tokens)
        I = ctypes.c_int * n
        out = np.zeros((n, part.m.n_embd), np.float32)
        rc = part.m.engine.lib.kvl_decode(part.ctx, n, I(*tokens), I(*pos), I(*seq),
                                          out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        return rc, out

    def _seen(self, m, emb, block, own):
        V = LABELS
        part = emb[block * V:(block + 1) * V]
        items = []
        if quantized(m.settings["type_v"]):
            # llama.cpp rotates V (Walsh-Hadamard) before a quantized store, so
            # unseen labels come back as round-off, not 0 (see SEEN_CUTOFF)
            top = float(np.max(np.abs(part)))
            hits = np.abs(part) > SEEN_CUTOFF * top if top > 0 else part != 0
        else:
            hits = part != 0
        for lab in np.nonzero(hits)[0]:
            lab = int(lab)
            if lab == PROBE and own == PROBE:
                continue
            items.append(m.labels.items.get(lab, "junk"))
        return items

    def forward(self, h, columns, ids, positions, left, right, decode):
        if h.armed and h.verify_start is None:
            h.verify_start = h.positions()
        seen = {}
        # Recurrent contexts first: a refusal there leaves the others untouched.
        for part in sorted(h.parts, key=lambda p: not p.m.recurrent):
            m = part.m
            tokens, pos, seq, keys = [], [], [], []
            for r in range(h.rows):
                for p, ident in zip(positions[r], ids[r]):
                    tokens.append(ident % RECURRENT_VOCAB if m.recurrent else m.labels.new(p, ident))
                    pos.append(p)
                    seq.append(part.seqs[r])
                    keys.append((r, p))
            if not tokens:
                continue
            rc, out = self._decode(part, tokens, pos, seq)
            if rc != 0:
                raise Refused("llama_decode returned %d" % rc)
            if m.recurrent:
                # the decode consumed the rows' pending rollbacks
                part.pending.difference_update(r for r in range(h.rows) if positions[r])
            for i, (r, p) in enumerate(keys):
                for li, block in m.blocks.items():
                    seen[(li, r, p)] = self._seen(m, out[i], block, tokens[i])
        return ForwardResult(seen)

    def _rm(self, h, starts):
        """llama_memory_seq_rm(seq r, starts[r], -1) in every context, as one
        atomic operation over the rows (adapter limit A1, fixed): every row
        of every recurrent context is checked first with llama.cpp's own rule
        (:meth:`_Part.rm_refusal`), and only when none would refuse is any
        sequence removed from. Attention caches never refuse (p0 < 0 is
        clamped to 0: D4). A refusal after a removal would mean the check
        missed a rule: that is an adapter error, never a partial trim."""
        parts = sorted(h.parts, key=lambda p: not p.m.recurrent)
        for part in parts:
            if part.m.recurrent:
                for r, p0 in enumerate(starts):
                    why = part.rm_refusal(r, p0)
                    if why:
                        raise Refused("llama_memory_seq_rm(seq %d, %d, -1) would return false "
                                      "(recurrent: %s); no row removed from" % (r, p0, why))
        for part in parts:
            lib = part.m.engine.lib
            for r, p0 in enumerate(starts):
                before = lib.kvl_seq_pos_max(part.ctx, part.seqs[r]) + 1
                if not lib.kvl_seq_rm(part.ctx, part.seqs[r], p0, -1):
                    raise RuntimeError("llama_memory_seq_rm(seq %d, %d, -1) returned false after "
                                       "the adapter's check accepted it" % (r, p0))
                if part.m.recurrent and 0 < p0 < before:
                    part.pending.add(r)   # a partial rollback, pending until a decode
                elif part.m.recurrent and p0 <= 0:
                    part.pending.discard(r)

    def trim(self, h, n, bypass):
        self._rm(h, [p - n for p in h.positions()])

    def arm(self, h):
        h.armed = True
        h.verify_start = None

    def accept(self, h, keep):
        if h.verify_start is None:
            raise Refused("accept: no verify forward since arm (the adapter's round bookkeeping)")
        self._rm(h, [s + k for s, k in zip(h.verify_start, keep)])
        h.armed = False
        h.verify_start = None

    # -- lifecycle ------------------------------------------------------------
    def _layout(self, h, rows, sources):
        """A new layout of ``rows`` rows; sources: (layout, row) per new row,
        copied with llama_state_seq_get_data / set_data."""
        c = Layout(h.models, rows)
        for dst, (src, r) in enumerate(sources):
            for pd, ps in zip(c.parts, src.parts):
                if pd.arena is not None and pd.arena is ps.arena:
                    pd.m.engine.lib.kvl_seq_cp(pd.ctx, ps.seqs[r], pd.seqs[dst], -1, -1)
                else:
                    pd.set_state(dst, ps.state(r))
        return c

    def fork(self, h):
        c = self._layout(h, h.rows, [(h, r) for r in range(h.rows)])
        c.armed, c.verify_start = h.armed, h.verify_start and list(h.verify_start)
        return c

    def filter(self, h, rows):
        return self._layout(h, len(rows), [(h, r) for r in rows])

    def join(self, h, other):
        return self._layout(h, h.rows + other.rows,
                            [(h, r) for r in range(h.rows)] + [(other, r) for r in range(other.rows)])

    def extract(self, h, row):
        return self._layout(h, 1, [(h, row)])

    def save(self, h):
        # The engine's per-sequence states, plus the adapter's own round
        # bookkeeping (where the verify forward began), as an integration
        # that persists a speculative round would keep it.
        return pickle.dumps(([[p.state(r) for p in h.parts] for r in range(h.rows)], h.armed,
                             h.verify_start))

    def load(self, data, like):
        states, armed, verify_start = pickle.loads(data)
        c = Layout(like.models, len(states))
        for r, row in enumerate(states):
            for p, s in zip(c.parts, row):
                p.set_state(r, s)
        c.armed, c.verify_start = armed, verify_start
        return c

    # -- observation ------------------------------------------------------------
    def positions(self, h):
        return h.positions()

    def trimmable(self, h, layer):
        raise NotApplicable("llama.cpp has no trimmability query")

    def kind(self, h, layer):
        raise NotApplicable("llama.cpp has no cache kinds in kvspec's sense")

    def bytes_per_token(self, h, layer):
        raise NotApplicable("the probe model's cache rows are not the trace's")

    def probe(self, part, r, p):
        """What a query at position p of row r attends to in an attention
        context, per trace layer: the row's state copied into a scratch
        context, one probe decode."""
        m = part.m
        lib = m.engine.lib
        if part.arena is not None:
            # seq_cp=1: copy the row to a scratch sequence of the same context
            sc = _Part(m, 1)
            lib.kvl_seq_cp(part.ctx, part.seqs[r], sc.seqs[0], -1, -1)
            rc, out = self._decode(sc, [PROBE], [p], [sc.seqs[0]])
            lib.kvl_seq_rm(sc.ctx, sc.seqs[0], -1, -1)
            if rc != 0:
                raise RuntimeError("probe decode failed: %d" % rc)
            return {li: sorted(self._seen(m, out[0], b, PROBE), key=str)
                    for li, b in m.blocks.items()}
        if m.scratch is None:
            # one scratch context per probe model and process
            key = (m.model, tuple(sorted(m.settings.items())))
            if key not in m.engine.scratch:
                m.engine.scratch[key] = _Part(m, 1)
            m.scratch = m.engine.scratch[key]
        sc = m.scratch
        lib.kvl_clear(sc.ctx)
        sc.set_state(0, part.state(r))
        rc, out = self._decode(sc, [PROBE], [p], [0])
        lib.kvl_clear(sc.ctx)
        if rc != 0:
            raise RuntimeError("probe decode failed: %d" % rc)
        return {li: sorted(self._seen(m, out[0], b, PROBE), key=str) for li, b in m.blocks.items()}

    def difference(self, a, b):
        if a.rows != b.rows:
            return "rows %d vs %d" % (a.rows, b.rows)
        pa, pb = a.positions(), b.positions()
        if pa != pb:
            return "positions %s vs %s" % (pa, pb)
        for r in range(a.rows):
            if pa[r] == 0:
                continue
            for x, y in zip(a.parts, b.parts):
                if x.m.recurrent:
                    xa, xb = x.state(r), y.state(r)
                    if xa != xb and (self.settings["exact_states"] or
                                     not state_layout.close(xa, xb, STATE_TOLERANCE)):
                        return "row %d: llama_state_seq_get_data differs (%d vs %d bytes%s)" % (
                            r, len(xa), len(xb), _float_note(xa, xb))
                    continue
                sa, sb = self.probe(x, r, pa[r]), self.probe(y, r, pa[r])
                for li in sorted(sa):
                    if sa[li] != sb[li]:
                        return "row %d layer %d: a probe decode sees %s vs %s" % (
                            r, li, sa[li], sb[li])
        return None
