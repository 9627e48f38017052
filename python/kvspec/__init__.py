"""kvspec: the reference for the caches of LLM inference, from Python.

With the compiled extension (``kvspec._core``, built by CMake) the package
wraps kvspec's core: layouts, forwards over numpy arrays, trims, rounds,
the batch lifecycle, the codec, the kernels and the trace library. Without
it, the conformance runner (``python3 -m kvspec.conform``) still runs in
pure-Python mode over the emitted traces in corpus/emitted/.

See docs/python.md.
"""

from .errors import NotApplicable, Refused, TraceSyntaxError

try:
    from . import _core
except ImportError:  # pure-Python mode
    _core = None

HAVE_CORE = _core is not None

if HAVE_CORE:
    from ._core import (  # noqa: F401
        LayerConfig,
        Layout,
        TraceContents,
        attend,
        attention_target,
        conv_step,
        decode_layout,
        encode_layout,
        gated_delta_step,
        prepare_query_key,
        run_trace,
        trace_forward,
    )
    from ._core import ATTENTION_TOLERANCE, CONV_TOLERANCE, GATED_DELTA_TOLERANCE  # noqa: F401
    from .program import parse_trace  # noqa: F401

__all__ = ["HAVE_CORE", "NotApplicable", "Refused", "TraceSyntaxError"]
