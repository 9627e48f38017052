"""Adapters shipped with kvspec (see kvspec.adapter for the protocol):

- ``kvspec.adapters.reference``: kvspec's own core through the compiled module.
- ``kvspec.adapters.numpy_cache``: a small pure-numpy cache written from
  DESIGN.md and TRACE.md, the way an engine author would.
- ``kvspec.adapters.naive_ring``: numpy_cache with a deliberately naive ring
  trim (counters only, even after a wrap), which the runner must catch.
- ``kvspec.adapters.llama_cpp``: llama.cpp (from npm, engines/llama.cpp)
  through its C API (the C shim beside the adapter) with generated probe
  models; docs/engines/llama.cpp.md.

The runner takes each by its bare name too: ``--adapter llama_cpp``. The
engines of :data:`PROCESS_ENGINES` run as their own process, over the
adapter protocol (docs/adapter-protocol.md): ``--adapter onnxruntime`` is
``--adapter-command 'node engines/onnxruntime/adapter.mjs'``, and
``--adapter transformers_js`` runs engines/transformers.js/transformers_js_adapter.mjs.
"""

import os
from typing import Dict, List, Tuple

#: Bundled engines that run as their own process: short name -> (interpreter,
#: script under the repository's engines/ folder).
PROCESS_ENGINES: Dict[str, Tuple[str, str]] = {
    "onnxruntime": ("node", os.path.join("onnxruntime", "adapter.mjs")),
    "transformers_js": ("node", os.path.join("transformers.js", "transformers_js_adapter.mjs")),
}


class EngineNotFound(RuntimeError):
    """A bundled engine's script is not where the repository keeps it."""


def engines_dir(script: str) -> str:
    """The repository's engines/ folder holding ``script``: $KVSPEC_ENGINES_DIR,
    else the first engines/ above this package (the source or build tree) or
    the working directory that holds it."""
    env = os.environ.get("KVSPEC_ENGINES_DIR")
    if env:
        return env
    starts = [os.path.dirname(os.path.realpath(__file__)), os.getcwd()]
    for d in starts:
        while True:
            if os.path.isfile(os.path.join(d, "engines", script)):
                return os.path.join(d, "engines")
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent
    raise EngineNotFound("engines/%s not found above %s or the working directory; set "
                         "KVSPEC_ENGINES_DIR to the repository's engines folder" % (
                             script, starts[0]))


def engine_command(name: str) -> List[str]:
    """The command line of the bundled process engine ``name``."""
    interpreter, script = PROCESS_ENGINES[name]
    return [interpreter, os.path.join(engines_dir(script), script)]
