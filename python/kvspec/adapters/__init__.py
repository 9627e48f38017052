"""Adapters shipped with kvspec (see kvspec.adapter for the protocol):

- ``kvspec.adapters.reference``: kvspec's own core through the compiled module.
- ``kvspec.adapters.numpy_cache``: a small pure-numpy cache written from
  DESIGN.md and TRACE.md, the way an engine author would.
- ``kvspec.adapters.naive_ring``: numpy_cache with a deliberately naive ring
  trim (counters only, even after a wrap), which the runner must catch.
- ``kvspec.adapters.llama_cpp``: llama.cpp (from npm, engines/llama.cpp)
  through its C API (the C shim beside the adapter) with generated probe
  models; docs/engines/llama.cpp.md.

The runner takes each by its bare name too: ``--adapter llama_cpp``.
"""
