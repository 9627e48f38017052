"""The llama.cpp adapter: kvspec's traces against llama.cpp's own caches.

    python3 -m kvspec.conform --adapter kvspec.adapters.llama_cpp FILE...

llama.cpp (the release node-llama-cpp pins in engines/llama.cpp/package.json,
installed by tools/setup with npm) is driven through its C API, llama.h:
a small C shim (engines/llama.cpp/shim.c, compiled on first use against the
headers of the same release, linked to its prebuilt libllama) and ctypes.
docs/engines/llama.cpp.md describes the mapping statement by statement.

The model is a *probe*: a gemma3-architecture GGUF written at run time with
llama.cpp's own gguf-py (never checked in; cached under $KVSPEC_LLAMA_CACHE
or a temporary directory). Every written token gets a fresh token id (its
*label*); the token embedding is one-hot on the label, query and key weights
are zero (every admitted cell gets the same attention weight), the value and
output projections copy the one-hot into a block of the residual stream of
its own per model layer, and the FFN is zero. So in a token's output
embedding the nonzero entries of layer l's block are exactly the labels of
the cells that query attended to in layer l: the adapter maps labels back to
the trace's (position, id). One full-attention model layer stands for the
trace's kv layers, one sliding-window layer (gemma3 SWA, the trace's window)
for its rotating layers: llama.cpp keeps one cache for each kind.

Settings that change cache behaviour come from $KVSPEC_LLAMA_SETTINGS, e.g.
``swa_full=0,kv_unified=0,n_seq_max=8,n_ubatch=1`` (defaults: swa_full=1,
kv_unified=1, n_seq_max=4 (a context has max(rows, n_seq_max) sequences), n_ubatch=64,
n_rs_seq=0).
"""

import ctypes
import gc
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import weakref

import numpy as np

from ..adapter import Adapter as Base, ForwardResult
from ..errors import NotApplicable, Refused

RELEASE = "v0.4.0"
LABELS = 512            # probe vocabulary: token ids (labels) per trace run
CELLS_PER_SEQ = 256     # context cells per sequence (positions per row)
PROBE = 0               # the label of probe decodes (never stored for good)
DEFAULTS = {"swa_full": 1, "kv_unified": 1, "n_seq_max": 4, "n_ubatch": 64, "n_rs_seq": 0,
            "verbose": 0}


class EngineMissing(RuntimeError):
    """The npm package is not installed (tools/setup installs it)."""


def _package_dir():
    env = os.environ.get("KVSPEC_LLAMA_CPP_DIR")
    if env:
        return env
    starts = [os.path.dirname(os.path.realpath(__file__)), os.getcwd()]
    for d in starts:
        while True:
            cand = os.path.join(d, "engines", "llama.cpp")
            if os.path.isfile(os.path.join(cand, "package.json")):
                return cand
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent
    raise EngineMissing("engines/llama.cpp not found above %s or the working directory; set "
                        "KVSPEC_LLAMA_CPP_DIR" % starts[0])


def _cache_dir():
    d = os.environ.get("KVSPEC_LLAMA_CACHE") or os.path.join(
        tempfile.gettempdir(), "kvspec-llama-cpp-%d" % os.getuid())
    os.makedirs(d, exist_ok=True)
    return d


def settings():
    s = dict(DEFAULTS)
    for item in filter(None, os.environ.get("KVSPEC_LLAMA_SETTINGS", "").split(",")):
        key, _, value = item.partition("=")
        if key.strip() not in s:
            raise ValueError("KVSPEC_LLAMA_SETTINGS: unknown setting %r" % key)
        s[key.strip()] = int(value)
    return s


class _Engine:
    """The loaded shim (one per process)."""

    _instance = None

    @classmethod
    def get(cls):
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def __init__(self):
        pkg = _package_dir()
        nm = os.path.join(pkg, "node_modules")
        self.bins = os.path.join(nm, "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
        bundle = os.path.join(nm, "node-llama-cpp", "llama", "gitRelease.bundle")
        lib = os.path.join(self.bins, "libllama.%s.so" % RELEASE)
        if not os.path.isfile(lib) or not os.path.isfile(bundle):
            raise EngineMissing("llama.cpp is not installed: %s or %s is missing (run tools/setup, "
                                "which runs npm ci in engines/llama.cpp)" % (lib, bundle))
        cache = _cache_dir()
        self.src = os.path.join(cache, "src-" + RELEASE)
        if not os.path.isfile(os.path.join(self.src, "include", "llama.h")):
            tmp = self.src + ".tmp%d" % os.getpid()
            shutil.rmtree(tmp, ignore_errors=True)
            subprocess.run(["git", "clone", "-q", "--no-checkout", bundle, tmp], check=True)
            subprocess.run(["git", "-C", tmp, "-c", "advice.detachedHead=false", "checkout", "-q",
                            "HEAD", "--", "include", "ggml/include", "gguf-py"], check=True)
            shutil.rmtree(self.src, ignore_errors=True)
            os.rename(tmp, self.src)
        shim_c = os.path.join(pkg, "shim.c")
        so = os.path.join(cache, "kvspec-llama-shim-%s.so" % RELEASE)
        if not os.path.isfile(so) or os.path.getmtime(so) < os.path.getmtime(shim_c):
            tmp = so + ".tmp%d" % os.getpid()
            subprocess.run([os.environ.get("CC", "cc"), "-O1", "-shared", "-fPIC", "-o", tmp, shim_c,
                            "-I" + os.path.join(self.src, "include"),
                            "-I" + os.path.join(self.src, "ggml", "include"),
                            "-L" + self.bins, "-l:libllama.%s.so" % RELEASE,
                            "-l:libggml.%s.so" % RELEASE, "-l:libggml-base.so",
                            "-Wl,-rpath," + self.bins], check=True)
            os.rename(tmp, so)
        lib = ctypes.CDLL(so)
        P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        IP, FP, BP = ctypes.POINTER(I), ctypes.POINTER(ctypes.c_float), ctypes.c_char_p
        for name, res, args in [
                ("kvl_init", I, [BP, I]), ("kvl_model", P, [BP]), ("kvl_model_free", None, [P]),
                ("kvl_context", P, [P, I, I, I, I, I, I, I]), ("kvl_free", None, [P]),
                ("kvl_n_embd", I, [P]), ("kvl_decode", I, [P, I, IP, IP, IP, FP]),
                ("kvl_seq_rm", I, [P, I, I, I]), ("kvl_seq_cp", None, [P, I, I, I, I]),
                ("kvl_seq_pos_max", I, [P, I]), ("kvl_seq_pos_min", I, [P, I]),
                ("kvl_clear", None, [P]), ("kvl_state_size", S, [P, I]),
                ("kvl_state_get", S, [P, ctypes.c_char_p, S, I]),
                ("kvl_state_set", S, [P, ctypes.c_char_p, S, I])]:
            f = getattr(lib, name)
            f.restype = res
            f.argtypes = args
        self.lib = lib
        if lib.kvl_init(self.bins.encode(), settings()["verbose"]) != 0:
            raise EngineMissing("llama.cpp found no backend in %s" % self.bins)
        self.models = {}
        self.cache = cache

    def model(self, layers, window):
        """The probe model for model layers ``layers`` ("full"/"swa") with
        sliding window ``window``: (model pointer, n_embd)."""
        key = (tuple(layers), window)
        if key not in self.models:
            path = os.path.join(self.cache, "probe-%s-w%d-v%d.gguf" % ("-".join(layers), window,
                                                                         LABELS))
            if not os.path.isfile(path):
                tmp = path + ".tmp%d" % os.getpid()
                write_probe_model(tmp, layers, window, LABELS, os.path.join(self.src, "gguf-py"))
                os.rename(tmp, path)
            m = self.lib.kvl_model(path.encode())
            if not m:
                raise RuntimeError("llama.cpp could not load the probe model %s" % path)
            self.models[key] = (m, self.lib.kvl_n_embd(m))
        return self.models[key]


def write_probe_model(path, layers, window, labels, gguf_py):
    """Writes the probe GGUF (see the module comment): gemma3, one head of
    dimension ``labels``, n_embd = labels * (len(layers) + 1)."""
    if gguf_py not in sys.path:
        sys.path.insert(0, gguf_py)
    import gguf  # llama.cpp's own writer, from the release's source tree
    V = labels
    E = V * (len(layers) + 1)
    w = gguf.GGUFWriter(path, "gemma3")
    w.add_context_length(1 << 16)
    w.add_embedding_length(E)
    w.add_block_count(len(layers))
    w.add_feed_forward_length(8)
    w.add_head_count(1)
    w.add_head_count_kv(1)
    w.add_key_length(V)
    w.add_value_length(V)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(V)
    w.add_tokenizer_model("none")
    if "swa" in layers:
        if layers not in (["swa"], ["swa", "full"]):
            raise ValueError("probe layers %s" % layers)
        w.add_sliding_window(window)
        w.add_sliding_window_pattern(2)  # layer 0 SWA, layer 1 (if any) full
    f16 = np.float16
    emb = np.zeros((V, E), f16)
    emb[np.arange(V), np.arange(V)] = 1
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("output_norm.weight", np.ones(E, np.float32))
    for i in range(len(layers)):
        b = "blk.%d." % i
        w.add_tensor(b + "attn_norm.weight", np.ones(E, np.float32))
        w.add_tensor(b + "attn_q.weight", np.zeros((V, E), f16))
        w.add_tensor(b + "attn_k.weight", np.zeros((V, E), f16))
        wv = np.zeros((V, E), f16)
        wv[np.arange(V), np.arange(V)] = 1               # v = the label's one-hot
        w.add_tensor(b + "attn_v.weight", wv)
        wo = np.zeros((E, V), f16)
        wo[V * (i + 1) + np.arange(V), np.arange(V)] = 1  # into block i + 1
        w.add_tensor(b + "attn_output.weight", wo)
        w.add_tensor(b + "post_attention_norm.weight", np.ones(E, np.float32))
        w.add_tensor(b + "attn_q_norm.weight", np.ones(V, np.float32))
        w.add_tensor(b + "attn_k_norm.weight", np.ones(V, np.float32))
        w.add_tensor(b + "ffn_norm.weight", np.ones(E, np.float32))
        for t in ("ffn_gate", "ffn_up"):
            w.add_tensor(b + t + ".weight", np.zeros((8, E), f16))
        w.add_tensor(b + "ffn_down.weight", np.zeros((E, 8), f16))
        w.add_tensor(b + "post_ffw_norm.weight", np.ones(E, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


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


class Layout:
    """One layout: a llama.cpp context whose sequence r is row r."""

    live = 0  # contexts not yet freed

    def __init__(self, shared, rows):
        # Contexts are freed with their handle; handles in reference cycles
        # (the runner's closures) wait for Python's cycle collector, which
        # does not see the contexts' memory: collect when many are alive.
        if Layout.live > 64:
            gc.collect()
        self.shared = shared  # the adapter-wide _Shared
        self.rows = rows
        eng = shared.engine
        s = shared.settings
        self.n_seq = max(rows, s["n_seq_max"])
        if self.n_seq > 64:
            raise NotApplicable("more than 64 sequences")
        self.ctx = eng.lib.kvl_context(shared.model, CELLS_PER_SEQ * self.n_seq, self.n_seq,
                                       max(256, s["n_ubatch"]), s["n_ubatch"], s["swa_full"],
                                       s["kv_unified"], s["n_rs_seq"])
        if not self.ctx:
            raise RuntimeError("llama_init_from_model failed")
        Layout.live += 1
        self._fin = weakref.finalize(self, Layout._free, eng.lib, self.ctx)
        self.armed = False
        self.verify_start = None

    @staticmethod
    def _free(lib, ctx):
        Layout.live -= 1
        lib.kvl_free(ctx)

    def positions(self):
        lib = self.shared.engine.lib
        return [lib.kvl_seq_pos_max(self.ctx, r) + 1 for r in range(self.rows)]

    def state(self, r):
        lib = self.shared.engine.lib
        n = lib.kvl_state_size(self.ctx, r)
        buf = ctypes.create_string_buffer(n)
        got = lib.kvl_state_get(self.ctx, buf, n, r)
        if got != n:
            raise RuntimeError("llama_state_seq_get_data wrote %d of %d bytes" % (got, n))
        return buf.raw

    def set_state(self, r, data):
        lib = self.shared.engine.lib
        got = lib.kvl_state_set(self.ctx, data, len(data), r)
        if got == 0:
            raise RuntimeError("llama_state_seq_set_data refused %d bytes for seq %d" % (len(data), r))


class _Shared:
    def __init__(self, engine, model, n_embd, blocks, settings_):
        self.engine = engine
        self.model = model
        self.n_embd = n_embd
        self.blocks = blocks          # trace layer -> embedding block (None: ssm)
        self.settings = settings_
        self.labels = _Labels()
        self.scratch = None


class Adapter(Base):
    name = "llama.cpp"
    # llama.cpp has no notion of kvspec's cache kinds, trimmability or bytes
    # per token, and the probe model computes no trace values.
    unobserved = frozenset(["kind", "trimmable", "bytes_per_token", "out"])

    def __init__(self):
        self.engine = _Engine.get()
        self.settings = settings()

    # -- construction -------------------------------------------------------
    def create(self, rows, layers):
        kinds = [l.kind for l in layers]
        if "ssm" in kinds:
            raise NotApplicable("recurrent (ssm) layers: the adapter has no gated DeltaNet probe "
                                "model yet")
        # A layer with a window (a ring, or a kv layer with window=) is a
        # gemma3 SWA layer; a windowless kv layer a full-attention one.
        windows = {l.window for l in layers if l.window}
        if len(windows) > 1:
            raise NotApplicable("layers with different windows (a llama.cpp model has one "
                                "sliding window)")
        window = windows.pop() if windows else 0
        has_full = any(not l.window for l in layers)
        model_layers = (["swa", "full"] if has_full else ["swa"]) if window else ["full"]
        model, n_embd = self.engine.model(model_layers, window)
        blocks = [model_layers.index("swa" if l.window else "full") + 1 for l in layers]
        shared = _Shared(self.engine, model, n_embd, blocks, self.settings)
        return Layout(shared, rows)

    def _new_like(self, h, rows):
        return Layout(h.shared, rows)

    # -- forwards -----------------------------------------------------------
    def _decode(self, ctx, tokens, pos, seq, shared):
        n = len(tokens)
        I = ctypes.c_int * n
        out = np.zeros((n, shared.n_embd), np.float32)
        rc = shared.engine.lib.kvl_decode(ctx, n, I(*tokens), I(*pos), I(*seq),
                                          out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        return rc, out

    def _seen(self, shared, emb, block, own):
        V = LABELS
        part = emb[block * V:(block + 1) * V]
        labels = np.nonzero(part != 0)[0]
        items = []
        for lab in labels:
            lab = int(lab)
            if lab == PROBE and own == PROBE:
                continue
            items.append(shared.labels.items.get(lab, "junk"))
        return items

    def forward(self, h, columns, ids, positions, left, right, decode):
        sh = h.shared
        tokens, pos, seq, keys = [], [], [], []
        for r in range(h.rows):
            for p, ident in zip(positions[r], ids[r]):
                tokens.append(sh.labels.new(p, ident))
                pos.append(p)
                seq.append(r)
                keys.append((r, p))
        if h.armed and h.verify_start is None:
            h.verify_start = h.positions()
        seen = {}
        if tokens:
            rc, out = self._decode(h.ctx, tokens, pos, seq, sh)
            if rc != 0:
                raise Refused("llama_decode returned %d" % rc)
            for i, (r, p) in enumerate(keys):
                for li, block in enumerate(sh.blocks):
                    seen[(li, r, p)] = self._seen(sh, out[i], block, tokens[i])
        return ForwardResult(seen)

    def _rm_tips(self, h, counts):
        lib = h.shared.engine.lib
        nxt = h.positions()
        for r, n in enumerate(counts):
            if not lib.kvl_seq_rm(h.ctx, r, nxt[r] - n, -1):
                raise Refused("llama_memory_seq_rm(seq %d, %d, -1) returned false" % (r, nxt[r] - n))

    def trim(self, h, n, bypass):
        self._rm_tips(h, [n] * h.rows)

    def arm(self, h):
        h.armed = True
        h.verify_start = None

    def accept(self, h, keep):
        if h.verify_start is None:
            raise Refused("accept: no verify forward since arm (the adapter's round bookkeeping)")
        lib = h.shared.engine.lib
        for r, k in enumerate(keep):
            p0 = h.verify_start[r] + k
            if not lib.kvl_seq_rm(h.ctx, r, p0, -1):
                raise Refused("llama_memory_seq_rm(seq %d, %d, -1) returned false" % (r, p0))
        h.armed = False
        h.verify_start = None

    # -- lifecycle ------------------------------------------------------------
    def _copy_rows(self, src, rows, dst, offset=0):
        for i, r in enumerate(rows):
            if src.positions()[r] > 0 or src.shared.engine.lib.kvl_state_size(src.ctx, r):
                dst.set_state(offset + i, src.state(r))

    def fork(self, h):
        c = self._new_like(h, h.rows)
        self._copy_rows(h, range(h.rows), c)
        c.armed, c.verify_start = h.armed, h.verify_start and list(h.verify_start)
        return c

    def filter(self, h, rows):
        c = self._new_like(h, len(rows))
        self._copy_rows(h, rows, c)
        return c

    def join(self, h, other):
        c = self._new_like(h, h.rows + other.rows)
        self._copy_rows(h, range(h.rows), c)
        self._copy_rows(other, range(other.rows), c, h.rows)
        return c

    def extract(self, h, row):
        c = self._new_like(h, 1)
        self._copy_rows(h, [row], c)
        return c

    def save(self, h):
        # The engine's per-sequence states, plus the adapter's own round
        # bookkeeping (where the verify forward began), as an integration
        # that persists a speculative round would keep it.
        return pickle.dumps(([h.state(r) for r in range(h.rows)], h.armed, h.verify_start))

    def load(self, data, like):
        states, armed, verify_start = pickle.loads(data)
        c = self._new_like(like, len(states))
        for r, s in enumerate(states):
            c.set_state(r, s)
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

    def probe(self, h, r):
        """What a query at row r's next position attends to, per layer: the
        row's state copied into a scratch context, one probe decode."""
        sh = h.shared
        lib = sh.engine.lib
        if sh.scratch is None:
            sh.scratch = Layout(sh, 1)
        sc = sh.scratch
        lib.kvl_clear(sc.ctx)
        sc.set_state(0, h.state(r))
        p = h.positions()[r]
        rc, out = self._decode(sc.ctx, [PROBE], [p], [0], sh)
        lib.kvl_clear(sc.ctx)
        if rc != 0:
            raise RuntimeError("probe decode failed: %d" % rc)
        return [sorted(self._seen(sh, out[0], b, PROBE), key=str) for b in sh.blocks]

    def difference(self, a, b):
        if a.rows != b.rows:
            return "rows %d vs %d" % (a.rows, b.rows)
        pa, pb = a.positions(), b.positions()
        if pa != pb:
            return "positions %s vs %s" % (pa, pb)
        for r in range(a.rows):
            if pa[r] == 0:
                continue
            sa, sb = self.probe(a, r), self.probe(b, r)
            for li, (x, y) in enumerate(zip(sa, sb)):
                if x != y:
                    return "row %d layer %d: a probe decode sees %s vs %s" % (r, li, x, y)
        return None
