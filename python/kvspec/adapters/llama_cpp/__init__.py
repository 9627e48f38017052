"""The llama.cpp adapter: kvspec's traces against llama.cpp's own caches.

    kvspec-conform --adapter llama_cpp FILE...

llama.cpp (the release node-llama-cpp pins in engines/llama.cpp/package.json,
installed by tools/setup with npm) is driven through its C API, llama.h:
a small C shim (shim.c beside this file, compiled on first use against the
headers of the same release, linked to its prebuilt libllama) and ctypes.
engine.py loads llama.cpp and the shim, probe_models.py writes the probe
models, llama_adapter.py maps the statements onto llama.cpp's contexts.
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

Settings that change cache behaviour are the runner's ``--setting KEY=VALUE``
options, e.g. ``--setting swa_full=0 --setting n_ubatch=1`` (defaults: swa_full=1,
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
equal`` compares the sequences' llama_state_seq_get_data bytes, read field
by field (state_layout.py): metadata bit for bit, values within a relative
1e-4, quantized blocks within one quantization step (exact_states=1: every
bit).

type_k / type_v (f32; f16, q8_0, q4_0) set the K/V cache types; flash_attn
follows type_v (llama.cpp needs it for a quantized V); attn_rot=0 turns off
llama.cpp's rotation of quantized K/V (needed for q4_0 values). With a
quantized V the outputs are read with a cutoff (SEEN_CUTOFF in
llama_adapter.py) and the recurrent probe has head dim 32.
"""

from .engine import Engine as Engine, EngineMissing as EngineMissing, settings as settings
from .llama_adapter import Adapter as Adapter, Layout as Layout
