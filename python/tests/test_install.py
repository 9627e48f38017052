"""The package installs into a virtual environment from the source tree,
without network, and works there (module and runner)."""
import os
import subprocess
import sys

from conftest import BUILD_DIR, SOURCE_DIR


def test_venv_install(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # Reuse this build's CMake folder: the extension is up to date there.
    env["KVSPEC_BUILD_DIR"] = BUILD_DIR
    p = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                        "--no-deps", os.path.join(SOURCE_DIR, "python")],
                       env=env, cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run([py, "-c", "import kvspec, numpy; print(kvspec.__file__, kvspec.HAVE_CORE);"
                        "l = kvspec.Layout(1, [kvspec.LayerConfig('a')]); print(l.kind(0))"],
                       env=env, cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    where, have, kind = p.stdout.split()
    assert where.startswith(str(venv)) and have == "True" and kind == "kv"
    trace = os.path.join(SOURCE_DIR, "corpus/traces/ring_trim.trace")
    p = subprocess.run([py, "-m", "kvspec.conform", "--adapter", "kvspec.adapters.naive_ring",
                        trace], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 1 and "fail %s:34:" % trace in p.stdout, p.stdout + p.stderr
    # the console script pip generated from pyproject.toml
    script = str(venv / "bin" / "kvspec-conform")
    p = subprocess.run([script, "--help"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("usage: kvspec-conform"), p.stderr
    p = subprocess.run([script, "--adapter", "naive_ring", trace], env=env, cwd=tmp_path,
                       capture_output=True, text=True)
    assert p.returncode == 1 and "fail %s:34:" % trace in p.stdout, p.stdout + p.stderr
    # the package data: the type stubs and the llama.cpp adapter's shim
    p = subprocess.run([py, "-c", "import os, kvspec, kvspec.adapters.llama_cpp as l\n"
                        "d = os.path.dirname\n"
                        "print(*(os.path.isfile(f) for f in (\n"
                        "    os.path.join(d(kvspec.__file__), 'py.typed'),\n"
                        "    os.path.join(d(kvspec.__file__), '_core.pyi'),\n"
                        "    os.path.join(d(l.__file__), 'shim.c'))))"],
                       env=env, cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.split() == ["True"] * 3, p.stdout + p.stderr
    assert not os.path.exists(os.path.join(SOURCE_DIR, "python", "build"))
