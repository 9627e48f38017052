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
n_rs_seq=8: recurrent-state snapshots for rollback, used by the recurrent
probe only; exact_states=0; seq_cp=0: with seq_cp=1 every layout lives in
one 128-sequence context per attention probe model and fork / filter / join
/ extract / the equality probes use llama_memory_seq_cp instead of state
copies; recurrent contexts keep state copies, whose bytes hold
context-dependent cell metadata; pool=1: freed contexts are reused after
llama_memory_clear, pool=0 creates each afresh).

Recurrent (ssm) layers use a second probe, a qwen35 gated DeltaNet hybrid
with small seeded random weights (write_recurrent_model): there the token
ids are the trace's ids, nothing is read from the outputs, and ``expect
equal`` compares the sequences' llama_state_seq_get_data bytes: integers
bit for bit, floats within a relative 1e-4 (exact_states=1: every bit).
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
RECURRENT_VOCAB = 1024  # the recurrent probe's vocabulary (trace ids mod this)
DEFAULTS = {"swa_full": 1, "kv_unified": 1, "n_seq_max": 4, "n_ubatch": 64, "n_rs_seq": 8,
            "verbose": 0, "exact_states": 0, "seq_cp": 0, "pool": 1}
POOL_PER_SHAPE = 8      # freed contexts kept for reuse per (model, n_seq, settings)
ARENA_SEQS = 128        # sequences of the shared context with seq_cp=1
ARENA_CELLS = 4096      # its cells (copies share cells)
STATE_TOLERANCE = 1e-4  # relative, as the runner's OUT_TOLERANCE


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
            try:
                os.rename(tmp, self.src)  # atomic: a concurrent run may have won
            except OSError:
                if not os.path.isfile(os.path.join(self.src, "include", "llama.h")):
                    shutil.rmtree(self.src, ignore_errors=True)  # a broken earlier attempt
                    os.rename(tmp, self.src)
                else:
                    shutil.rmtree(tmp, ignore_errors=True)
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
        self.arenas = {}
        self.scratch = {}
        self.cache = cache

    def recurrent_model(self, conv):
        key = ("recurrent", conv)
        if key not in self.models:
            path = os.path.join(self.cache, "probe-qwen35-conv%d-v%d.gguf" % (conv, RECURRENT_VOCAB))
            self._load(key, path, lambda tmp, gguf: write_recurrent_model(tmp, conv,
                                                                          RECURRENT_VOCAB, gguf))
        return self.models[key]

    def model(self, layers, window):
        """The probe model for model layers ``layers`` ("full"/"swa") with
        sliding window ``window``: (model pointer, n_embd)."""
        key = (tuple(layers), window)
        if key not in self.models:
            path = os.path.join(self.cache, "probe-%s-w%d-v%d.gguf" % ("-".join(layers), window,
                                                                         LABELS))
            self._load(key, path, lambda tmp, gguf: write_probe_model(tmp, layers, window, LABELS,
                                                                      gguf))
        return self.models[key]

    def _load(self, key, path, write):
        """Loads the probe model at ``path`` into ``self.models[key]``, first
        writing it with ``write(tmp_path, gguf_py_dir)`` when it is not cached."""
        if not os.path.isfile(path):
            tmp = path + ".tmp%d" % os.getpid()
            write(tmp, os.path.join(self.src, "gguf-py"))
            os.rename(tmp, path)
        m = self.lib.kvl_model(path.encode())
        if not m:
            raise RuntimeError("llama.cpp could not load the probe model %s" % path)
        self.models[key] = (m, self.lib.kvl_n_embd(m))


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


def write_recurrent_model(path, conv, vocab, gguf_py):
    """Writes the recurrent probe GGUF: qwen35 (gated DeltaNet hybrid), layer
    0 a gated DeltaNet layer with conv kernel ``conv``, layer 1 full
    attention, small seeded random weights. Token ids are the trace's ids
    (mod ``vocab``): equal histories give equal states, and the states are
    compared bytes for bytes (llama_state_seq_get_data)."""
    if gguf_py not in sys.path:
        sys.path.insert(0, gguf_py)
    import gguf
    E, D, NK, NV, FF, HEADS, HD = 32, 16, 1, 2, 16, 2, 16
    key_dim, value_dim = D * NK, D * NV
    conv_dim = 2 * key_dim + value_dim
    rng = np.random.default_rng(20261202)

    def rnd(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)
    w = gguf.GGUFWriter(path, "qwen35")
    w.add_context_length(1 << 16)
    w.add_embedding_length(E)
    w.add_block_count(2)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(1)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_rope_dimension_count(HD)
    w.add_array("qwen35.rope.dimension_sections", [4, 2, 2, 0])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_uint32("qwen35.full_attention_interval", 2)
    w.add_uint32("qwen35.ssm.conv_kernel", conv)
    w.add_uint32("qwen35.ssm.inner_size", value_dim)
    w.add_uint32("qwen35.ssm.state_size", D)
    w.add_uint32("qwen35.ssm.time_step_rank", NV)
    w.add_uint32("qwen35.ssm.group_count", NK)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("none")
    w.add_tensor("token_embd.weight", rnd(vocab, E))
    w.add_tensor("output_norm.weight", np.ones(E, np.float32))
    for i in range(2):
        b = "blk.%d." % i
        w.add_tensor(b + "attn_norm.weight", np.ones(E, np.float32))
        w.add_tensor(b + "post_attention_norm.weight", np.ones(E, np.float32))
        if i == 0:
            w.add_tensor(b + "attn_qkv.weight", rnd(conv_dim, E))
            w.add_tensor(b + "attn_gate.weight", rnd(value_dim, E))
            w.add_tensor(b + "ssm_conv1d.weight", rnd(conv_dim, conv))
            w.add_tensor(b + "ssm_dt.bias", rnd(NV))
            w.add_tensor(b + "ssm_a", -np.abs(rnd(NV)) - 0.1)
            w.add_tensor(b + "ssm_beta.weight", rnd(NV, E))
            w.add_tensor(b + "ssm_alpha.weight", rnd(NV, E))
            w.add_tensor(b + "ssm_norm.weight", np.ones(D, np.float32))
            w.add_tensor(b + "ssm_out.weight", rnd(E, value_dim))
        else:
            w.add_tensor(b + "attn_q.weight", rnd(HD * HEADS * 2, E))
            w.add_tensor(b + "attn_k.weight", rnd(HD, E))
            w.add_tensor(b + "attn_v.weight", rnd(HD, E))
            w.add_tensor(b + "attn_output.weight", rnd(E, HD * HEADS))
            w.add_tensor(b + "attn_q_norm.weight", np.ones(HD, np.float32))
            w.add_tensor(b + "attn_k_norm.weight", np.ones(HD, np.float32))
        w.add_tensor(b + "ffn_gate.weight", rnd(FF, E))
        w.add_tensor(b + "ffn_up.weight", rnd(FF, E))
        w.add_tensor(b + "ffn_down.weight", rnd(E, FF))
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


class _Arena:
    """seq_cp=1: one context per probe model holding every layout's rows as
    sequences; fork, filter, join and extract are llama_memory_seq_cp, not
    state copies."""

    def __init__(self, m):
        s = m.settings
        lib = m.engine.lib
        self.lib = lib
        self.ctx = lib.kvl_context(m.model, ARENA_CELLS, ARENA_SEQS,
                                   max(256, s["n_ubatch"]), s["n_ubatch"], s["swa_full"],
                                   s["kv_unified"], s["n_rs_seq"])
        if not self.ctx:
            raise RuntimeError("llama_init_from_model failed")
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
    pool = {}  # (model, n_seq, settings) -> freed contexts kept for reuse

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
                key = (m.model, tuple(sorted(s.items())))
                if key not in m.engine.arenas:
                    m.engine.arenas[key] = _Arena(m)
                m.arena = m.engine.arenas[key]
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
            self.ctx = lib.kvl_context(m.model, CELLS_PER_SEQ * self.n_seq, self.n_seq,
                                       max(256, s["n_ubatch"]), s["n_ubatch"], s["swa_full"],
                                       s["kv_unified"], s["n_rs_seq"])
            if not self.ctx:
                raise RuntimeError("llama_init_from_model failed")
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


def _close(a, b):
    """Two states equal but for float rounding: the same length, every word
    that is not a normal float32 (integers, flags) bit for bit, the floats
    within STATE_TOLERANCE. llama.cpp's results depend on how a batch is
    split (a chunked gated DeltaNet step is not bit for bit the recurrent
    one), so two schedules of the same history differ in the last bits."""
    if len(a) != len(b) or len(a) % 4:
        return False
    x, y = np.frombuffer(a, np.float32), np.frombuffer(b, np.float32)
    with np.errstate(all="ignore"):
        normal = (np.abs(x) >= 1e-30) & (np.abs(y) >= 1e-30) & np.isfinite(x) & np.isfinite(y)
    if np.any(np.frombuffer(a, np.uint32)[~normal] != np.frombuffer(b, np.uint32)[~normal]):
        return False
    xd, yd = x[normal].astype(np.float64), y[normal].astype(np.float64)
    return bool(np.all(np.abs(xd - yd) <= STATE_TOLERANCE * (1 + np.abs(xd))))


class Adapter(Base):
    name = "llama.cpp"
    # llama.cpp has no notion of kvspec's cache kinds, trimmability or bytes
    # per token, and the probe models compute no trace values.
    unobserved = frozenset(["kind", "trimmable", "bytes_per_token", "out"])

    def __init__(self):
        self.engine = _Engine.get()
        self.settings = settings()

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
        for c in convs:
            model, n_embd = eng.recurrent_model(c)
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
        for lab in np.nonzero(part != 0)[0]:
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
                    if xa != xb and (self.settings["exact_states"] or not _close(xa, xb)):
                        return "row %d: llama_state_seq_get_data differs (%d vs %d bytes%s)" % (
                            r, len(xa), len(xb), _float_note(xa, xb))
                    continue
                sa, sb = self.probe(x, r, pa[r]), self.probe(y, r, pa[r])
                for li in sorted(sa):
                    if sa[li] != sb[li]:
                        return "row %d layer %d: a probe decode sees %s vs %s" % (
                            r, li, sa[li], sb[li])
        return None
