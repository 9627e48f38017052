"""kvspec: the reference for the caches of LLM inference, from Python.

With the compiled extension (``kvspec._core``, built by CMake) the package
wraps kvspec's core: layouts, forwards over numpy arrays, trims, rounds,
the batch lifecycle, the codec, the kernels and the trace library. Without
it, the conformance runner (``python3 -m kvspec.conform``) still runs in
pure-Python mode over the emitted traces in corpus/emitted/.

See docs/python.md.
"""

from .errors import NotApplicable as NotApplicable, Refused as Refused, \
    TraceSyntaxError as TraceSyntaxError

try:
    from . import _core
except ImportError:  # pure-Python mode
    _core = None  # type: ignore[assignment]

HAVE_CORE = _core is not None

if HAVE_CORE:
    from ._core import (
        ATTENTION_TOLERANCE as ATTENTION_TOLERANCE,
        CONV_TOLERANCE as CONV_TOLERANCE,
        GATED_DELTA_TOLERANCE as GATED_DELTA_TOLERANCE,
        MAX_TRACE_BYTES as MAX_TRACE_BYTES,
        LayerConfig as LayerConfig,
        Layout as Layout,
        TraceContents as TraceContents,
        attend as attend,
        attention_target as attention_target,
        conv_step as conv_step,
        decode_layout as decode_layout,
        encode_layout as encode_layout,
        gated_delta_step as gated_delta_step,
        prepare_query_key as prepare_query_key,
        run_trace as run_trace,
        trace_forward as trace_forward,
    )
    from .program import parse_trace as parse_trace

__all__ = ["HAVE_CORE", "NotApplicable", "Refused", "TraceSyntaxError"]
