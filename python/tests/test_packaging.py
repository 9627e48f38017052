"""python/pyproject.toml against the package: the console script resolves to
a callable that runs, and every third-party module the package imports is a
declared dependency (or extra)."""
import ast
import contextlib
import importlib
import io
import os
import re
import subprocess
import sys
import tomllib
from typing import Set

import pytest

from conftest import SOURCE_DIR

PYPROJECT = os.path.join(SOURCE_DIR, "python", "pyproject.toml")
PACKAGE = os.path.join(SOURCE_DIR, "python", "kvspec")


def project():
    with open(PYPROJECT, "rb") as f:
        return tomllib.load(f)["project"]


def requirement_name(req):
    return re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].strip().lower()


def test_console_script_runs():
    target = project()["scripts"]["kvspec-conform"]
    module_name, _, attr = target.partition(":")
    main = getattr(importlib.import_module(module_name), attr)
    assert callable(main)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "--adapter" in out.getvalue()
    # and it runs a trace: a failure is exit status 1, with the trace's line
    trace = os.path.join(SOURCE_DIR, "corpus/traces/ring_trim.trace")
    with contextlib.redirect_stdout(out):
        status = main(["--adapter", "naive_ring", trace])
    assert status == 1 and "fail %s:34:" % trace in out.getvalue()


def test_entry_point_module_runs_as_the_script():
    # the same callable through a fresh interpreter, as the generated script calls it
    module_name, _, attr = project()["scripts"]["kvspec-conform"].partition(":")
    p = subprocess.run([sys.executable, "-c",
                        "import sys; sys.argv[0] = 'kvspec-conform'\n"
                        "from %s import %s as main; sys.exit(main())" % (module_name, attr),
                        "--help"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: kvspec-conform")


def third_party_imports():
    """Top-level names of the modules the package imports that are neither
    the standard library nor the package itself."""
    names: Set[str] = set()
    for root, _, files in os.walk(PACKAGE):
        for f in files:
            if not f.endswith(".py"):
                continue
            tree = ast.parse(open(os.path.join(root, f)).read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    # gguf: llama.cpp's own writer, from the pinned release's source at run time
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("kvspec", "gguf")}


def test_imports_are_declared():
    p = project()
    declared = {requirement_name(r) for r in p["dependencies"]}
    extras = {requirement_name(r) for reqs in p["optional-dependencies"].values() for r in reqs}
    assert "numpy" in declared
    used = third_party_imports()
    assert used, "no third-party import found: the scan is broken"
    missing = used - declared - extras
    assert not missing, "imported but not declared in pyproject.toml: %s" % sorted(missing)
