"""llama.cpp loaded for the adapter: the npm package's prebuilt libraries,
the headers and gguf-py of the same release, the C shim (shim.c) compiled
against them, the probe models, and the settings (the runner's --setting
KEY=VALUE options)."""

import ctypes
import os
import shutil
import subprocess
import tempfile
from typing import Any, Dict, Optional

from .probe_models import write_probe_model, write_recurrent_model

RELEASE = "v0.4.0"
LABELS = 512            # probe vocabulary: token ids (labels) per trace run
CELLS_PER_SEQ = 256     # context cells per sequence (positions per row)
PROBE = 0               # the label of probe decodes (never stored for good)
RECURRENT_VOCAB = 1024  # the recurrent probe's vocabulary (trace ids mod this)
DEFAULTS: Dict[str, Any] = {
    "swa_full": 1, "kv_unified": 1, "n_seq_max": 4, "n_ubatch": 64, "n_rs_seq": 8, "verbose": 0,
    "exact_states": 0, "seq_cp": 0, "pool": 1, "type_k": "f32", "type_v": "f32",
    "flash_attn": -1, "attn_rot": 1}
# K/V cache types (llama_context_params' type_k / type_v): name -> ggml_type
# (ggml.h); f32 is the adapter's default (nothing rounded), f16 llama.cpp's.
CACHE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8}
QUANT_BLOCK = 32        # values per q8_0 / q4_0 block: head dims must be a multiple
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


def settings(given: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """DEFAULTS with the given settings (``{"swa_full": "0"}``: the runner's
    --setting options, string values) over them; ValueError for an unknown
    key or a bad value. type_k / type_v take a CACHE_TYPES name; flash_attn
    (-1: on exactly when type_v is quantized, which llama.cpp requires)
    ends up 0 or 1; attn_rot=0 turns off llama.cpp's Walsh-Hadamard rotation
    of quantized K/V (LLAMA_ATTN_ROT_DISABLE)."""
    s = dict(DEFAULTS)
    for key, value in (given or {}).items():
        if key not in s:
            raise ValueError("unknown setting %r (llama_cpp takes %s)" % (key, ", ".join(DEFAULTS)))
        if key in ("type_k", "type_v"):
            if value not in CACHE_TYPES:
                raise ValueError("setting %s=%r: expected one of %s" % (key, value,
                                                                      ", ".join(CACHE_TYPES)))
            s[key] = value
            continue
        try:
            s[key] = int(value)
        except ValueError:
            raise ValueError("setting %s=%r: expected an integer" % (key, value))
    if s["attn_rot"] not in (0, 1):
        raise ValueError("setting attn_rot=%d: expected 0 or 1" % s["attn_rot"])
    if s["type_v"] == "q4_0" and s["attn_rot"]:
        raise ValueError("setting type_v=q4_0 needs attn_rot=0: llama.cpp rotates V before a "
                         "quantized store, and q4_0 stores a rotated one-hot with errors of an "
                         "eighth of its magnitude, which the probe cannot tell from a seen cell")
    if s["flash_attn"] not in (-1, 0, 1):
        raise ValueError("setting flash_attn=%d: expected 0 or 1" % s["flash_attn"])
    if s["flash_attn"] == -1:
        s["flash_attn"] = 1 if quantized(s["type_v"]) else 0
    if s["flash_attn"] == 0 and quantized(s["type_v"]):
        raise ValueError("setting type_v=%s needs flash_attn=1 (llama.cpp refuses a quantized V "
                         "cache without flash attention)" % s["type_v"])
    return s


def quantized(cache_type: str) -> bool:
    """Whether a CACHE_TYPES name is a block format (head dims: multiples of
    QUANT_BLOCK)."""
    return cache_type in ("q8_0", "q4_0")


class Engine:
    """The loaded shim (one per process)."""

    _instance = None

    @classmethod
    def get(cls, verbose=0):
        if cls._instance is None:
            cls._instance = cls(verbose)
        return cls._instance

    def __init__(self, verbose=0):
        pkg = _package_dir()
        nm = os.path.join(pkg, "node_modules")
        self.bins = os.path.join(nm, "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
        bundle = os.path.join(nm, "node-llama-cpp", "llama", "gitRelease.bundle")
        libllama = os.path.join(self.bins, "libllama.%s.so" % RELEASE)
        if not os.path.isfile(libllama) or not os.path.isfile(bundle):
            raise EngineMissing("llama.cpp is not installed: %s or %s is missing (run tools/setup, "
                                "which runs npm ci in engines/llama.cpp)" % (libllama, bundle))
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
        shim_c = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim.c")
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
                ("kvl_context", P, [P, I, I, I, I, I, I, I, I, I, I]), ("kvl_free", None, [P]),
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
        if lib.kvl_init(self.bins.encode(), verbose) != 0:
            raise EngineMissing("llama.cpp found no backend in %s" % self.bins)
        self.models = {}
        self.arenas = {}
        self.scratch = {}
        self.cache = cache

    def recurrent_model(self, conv, head_dim=16):
        """The qwen35 probe with conv kernel ``conv`` and attention head dim
        ``head_dim`` (QUANT_BLOCK for quantized caches, which llama.cpp
        refuses on a head dim of 16)."""
        key = ("recurrent", conv, head_dim)
        if key not in self.models:
            hd = "" if head_dim == 16 else "-hd%d" % head_dim
            path = os.path.join(self.cache, "probe-qwen35-conv%d%s-v%d.gguf" % (conv, hd,
                                                                              RECURRENT_VOCAB))
            self._load(key, path, lambda tmp, gguf: write_recurrent_model(
                tmp, conv, RECURRENT_VOCAB, gguf, head_dim))
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
