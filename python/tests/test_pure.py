"""Pure-Python mode: the runner without kvspec._core, over corpus/emitted."""
import glob
import os
import subprocess
import sys

from conftest import SOURCE_DIR, load_under_one_gib, sparse_file

EMITTED = sorted(glob.glob(os.path.join(SOURCE_DIR, "corpus/emitted/**/*.json"), recursive=True))


def runner(*args):
    # The source tree's package has no compiled extension beside it.
    env = dict(os.environ, PYTHONPATH=os.path.join(SOURCE_DIR, "python"))
    return subprocess.run([sys.executable, "-m", "kvspec.conform"] + list(args), env=env,
                          capture_output=True, text=True, cwd=SOURCE_DIR)


def test_module_is_hidden():
    p = subprocess.run([sys.executable, "-c", "import kvspec; print(kvspec.HAVE_CORE)"],
                       env=dict(os.environ, PYTHONPATH=os.path.join(SOURCE_DIR, "python")),
                       capture_output=True, text=True)
    assert p.stdout.strip() == "False", p.stderr


def test_numpy_cache_passes_the_emitted_corpus():
    assert len(EMITTED) > 90
    p = runner("--adapter", "kvspec.adapters.numpy_cache", *EMITTED)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert "# mode: pure Python: the traces' own expectations only" in p.stdout
    passed = sum(line.startswith("pass ") for line in lines)
    assert passed > 50
    assert lines[-1] == "%d passed, 0 failed, %d not applicable" % (passed, len(EMITTED) - passed)


def test_naive_ring_is_caught_without_the_module():
    p = runner("--adapter", "kvspec.adapters.naive_ring", *EMITTED)
    assert p.returncode == 1
    fails = [line for line in p.stdout.splitlines() if line.startswith("fail ")]
    assert len(fails) >= 15
    for line in fails:
        # Lines of the original trace: fail corpus/traces/X.trace:N: ...
        head = line.split(": ")[0]
        name, _, number = head[len("fail "):].rpartition(":")
        assert name.startswith("corpus/traces/") and int(number) > 0, line


def test_trace_files_need_the_module():
    p = runner("--adapter", "kvspec.adapters.numpy_cache", "corpus/traces/kv_decode.trace")
    assert p.returncode == 1
    assert "needs the compiled module" in p.stdout and "corpus/emitted/kv_decode.json" in p.stdout


def test_files_over_the_caps_are_refused_without_being_held(tmp_path):
    # A sparse file far over the cap: read no further than the cap (a whole
    # read would hold 8 GiB), refused with the cap named. A .trace file in
    # pure-Python mode is refused before it is read (the .trace cap, with
    # the module: test_module.py).
    env = dict(os.environ, PYTHONPATH=os.path.join(SOURCE_DIR, "python"))
    path = sparse_file(tmp_path / "big.json")
    assert load_under_one_gib(path, env) == "%s:1:1: file larger than 64 MiB\n" % path
    path = sparse_file(tmp_path / "big.trace")
    assert "needs the compiled module" in load_under_one_gib(path, env)
