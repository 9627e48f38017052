"""Engines as processes over the adapter protocol (docs/adapter-protocol.md):
the JavaScript toy engine and its forgetful-ring twin (kit/examples/)
through the runner, the runner's handling of an engine that misbehaves,
settings, bundled process engines."""
import gc
import glob
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from kvspec import conform, program
from kvspec.adapters import PROCESS_ENGINES, EngineNotFound, engine_command
from kvspec.process import AdapterFailure, ProcessAdapter
from conftest import BUILD_DIR, SOURCE_DIR

TRACES = sorted(glob.glob(os.path.join(SOURCE_DIR, "corpus/traces/*.trace"))) + \
    sorted(glob.glob(os.path.join(SOURCE_DIR, "corpus/traces/conformance/*.trace")))
NODE = shutil.which("node")
TOY = os.path.join(SOURCE_DIR, "kit", "examples", "toy.mjs")
FORGETFUL = os.path.join(SOURCE_DIR, "kit", "examples", "toy-forgetful-ring.mjs")
FAKE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_engine.py")
DECODES = "trace 1\nrows 1\nlayer a kv heads=1 dim=4\ndecode\ndecode\nexpect positions 2\n"

needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed (tools/setup)")


def conform_cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD_DIR, "python"))
    return subprocess.run([sys.executable, "-m", "kvspec.conform"] + list(args), env=env,
                          cwd=cwd, capture_output=True, text=True, timeout=600)


def fake(mode, *extra):
    return shlex.join([sys.executable, FAKE, mode] + list(extra))


@pytest.fixture(autouse=True)
def _node_present():
    # the kit's engines need node; a machine without it fails, never skips
    assert NODE is not None, "node is not installed (tools/setup installs it)"


def test_toy_passes_every_trace():
    p = conform_cli("--adapter-command", "node " + shlex.quote(TOY), *TRACES)
    lines = p.stdout.splitlines()
    assert p.returncode == 0, p.stdout + p.stderr
    assert [l for l in lines[:-2] if not l.startswith("pass ")] == []
    assert lines[-2] == "# mode: compared with kvspec's core"
    assert lines[-1] == "%d passed, 0 failed, 0 not applicable" % len(TRACES)
    assert "Traceback" not in p.stderr


def test_forgetful_ring_is_caught_on_the_ring_traces():
    p = conform_cli("--adapter-command", "node " + shlex.quote(FORGETFUL), *TRACES)
    assert p.returncode == 1
    failed = [l for l in p.stdout.splitlines() if l.startswith("fail ")]
    assert len(failed) >= 15
    for line in failed:
        path = line[5:].split(":")[0]
        assert any(layer.kind == "rotating" for layer in program.load(path).layers), line
        assert line.split(":")[1].isdigit(), line  # fail FILE:LINE: ...
    assert p.stdout.splitlines()[-1].endswith(" failed, 0 not applicable")


def test_random_mode_finds_and_shrinks_the_forgetful_ring(tmp_path):
    out = tmp_path / "found"
    p = conform_cli("--adapter-command", "node " + shlex.quote(FORGETFUL), "--random", "100",
                    "--seed", "3", "--kinds", "rotating", "--keep-going", "--progress", "0",
                    "--out", str(out), cwd=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    summary = p.stdout.splitlines()[-1].split(", ")
    assert summary[1] != "0 failed" and summary[2] == "0 not applicable", summary
    written = sorted(out.glob("*.trace"))
    assert written
    for trace in written:
        text = trace.read_text()
        assert "rotating" in text
        # shrunk: a handful of statements
        assert len([l for l in text.splitlines() if not l.startswith("#")]) <= 10, text
        # the written trace reproduces the failure; the correct toy passes it
        again = conform_cli("--adapter-command", "node " + shlex.quote(FORGETFUL), str(trace))
        assert again.returncode == 1 and again.stdout.startswith("fail "), again.stdout
        toy = conform_cli("--adapter-command", "node " + shlex.quote(TOY), str(trace))
        assert toy.returncode == 0, toy.stdout
        assert toy.stdout.splitlines()[-1] == "1 passed, 0 failed, 0 not applicable"


@pytest.mark.parametrize("mode,what", [
    ("garbage", "wrote a line that is not an answer (stdout carries answers only): "
                "loading weights..."),
    ("wrong_id", "answered id"),
    ("silent", "gave no answer within 1 s (--adapter-timeout)"),
    ("exit", "exited with status 3"),
    ("crash", "was killed by signal SIGKILL"),
    ("no_seen", "answered forward without 'seen'"),
])
def test_a_misbehaving_process_is_an_adapter_failure(tmp_path, mode, what):
    trace = tmp_path / "decodes.trace"
    trace.write_text(DECODES)
    command = fake(mode, str(tmp_path / "flag"))
    p = conform_cli("--adapter-command", command, "--adapter-timeout", "1", str(trace), str(trace))
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stdout.splitlines()
    assert p.returncode == 1, p.stdout + p.stderr
    # the first trace fails naming the command and quoting its stderr; the
    # next one runs on a new process (the fake misbehaves once)
    assert lines[0].startswith("fail %s: adapter failure: `%s` " % (trace, command)), lines[0]
    assert what in lines[0]
    assert "fake engine: about to %s" % mode in lines[0]
    assert lines[1] == "pass %s" % trace
    assert lines[-1] == "1 passed, 1 failed, 0 not applicable"


def test_a_failure_answer_fails_the_trace_on_the_same_process(tmp_path):
    trace = tmp_path / "decodes.trace"
    trace.write_text(DECODES)
    p = conform_cli("--adapter-command", fake("failure", str(tmp_path / "flag")), str(trace),
                    str(trace))
    lines = p.stdout.splitlines()
    assert lines[0] == "fail %s: adapter failure: fake: out of cheese" % trace
    assert lines[1] == "pass %s" % trace
    assert lines[-1] == "1 passed, 1 failed, 0 not applicable"


def test_startup_failures_stop_the_run(tmp_path):
    trace = tmp_path / "decodes.trace"
    trace.write_text(DECODES)
    p = conform_cli("--adapter-command", fake("refuse_hello"), str(trace))
    assert p.returncode == 2, p.stderr
    assert p.stderr == "python3 -m kvspec.conform: error: `%s` refused hello: no GPU here\n" % (
        fake("refuse_hello"))
    p = conform_cli("--adapter-command", "/nonexistent/engine --flag", str(trace))
    assert p.returncode == 2 and "cannot be started" in p.stderr
    p = conform_cli("--adapter-command", "node " + shlex.quote(TOY), "--setting", "buffer=ring",
                    str(trace))
    assert p.returncode == 2 and "toy takes no settings (got buffer)" in p.stderr, p.stderr
    p = conform_cli("--adapter", "numpy_cache", "--setting", "x=1", str(trace))
    assert p.returncode == 2 and "numpy_cache takes no settings (got x)" in p.stderr
    p = conform_cli("--adapter", "numpy_cache", "--setting", "novalue", str(trace))
    assert p.returncode == 2 and "expected KEY=VALUE" in p.stderr
    for out in (p.stdout, p.stderr):
        assert "Traceback" not in out


def test_settings_reach_the_engine():
    a = ProcessAdapter([sys.executable, FAKE, "good"])
    try:
        assert a.configure({"buffer": "ring", "n": "3"}) == {"buffer": "ring", "n": "3"}
        assert a.name == "fake"
        assert a.unobserved == frozenset(["kind", "trimmable", "bytes_per_token", "out"])
    finally:
        a.close()
    assert a.proc is None


def test_handles_are_released():
    a = ProcessAdapter([sys.executable, FAKE, "good"])
    try:
        a.configure({})
        prog = program.parse_trace(DECODES)
        handles = [a.create(1, prog.layers) for _ in range(3)]
        assert a.live == {"h1", "h2", "h3"}
        del handles[1:]
        gc.collect()
        assert a.positions(handles[0]) == [0]  # sends the release first
        assert a.live == {"h1"}
    finally:
        a.close()
    with pytest.raises(AdapterFailure, match="has ended"):
        a.positions(handles[0])


def test_bundled_process_engines(tmp_path, monkeypatch):
    script = tmp_path / "engines" / "onnxruntime" / "adapter.mjs"
    script.parent.mkdir(parents=True)
    script.write_text("")
    monkeypatch.setenv("KVSPEC_ENGINES_DIR", str(tmp_path / "engines"))
    assert engine_command("onnxruntime") == ["node", str(script)]
    # without the variable: above the package (the repository's, once it has
    # the engine) or above the working directory
    monkeypatch.delenv("KVSPEC_ENGINES_DIR")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert engine_command("onnxruntime")[1] in (
        str(script), os.path.join(SOURCE_DIR, "engines", "onnxruntime", "adapter.mjs"))


def test_bundled_process_engines_are_in_the_repository():
    # each short name's script is where the repository keeps it
    assert sorted(PROCESS_ENGINES) == ["onnxruntime", "transformers_js"]
    for name, (interpreter, script) in PROCESS_ENGINES.items():
        assert interpreter == "node"
        assert os.path.isfile(os.path.join(SOURCE_DIR, "engines", script)), name


def test_load_adapter_names():
    assert isinstance(conform.load_adapter("numpy_cache"), conform.Adapter)
    adapter = ProcessAdapter(["node", TOY])
    assert conform.load_adapter(adapter) is adapter
    with pytest.raises(EngineNotFound if not os.path.isfile(
            os.path.join(SOURCE_DIR, "engines", "onnxruntime", "adapter.mjs")) else AssertionError):
        old = os.environ.pop("KVSPEC_ENGINES_DIR", None)
        try:
            os.chdir("/")
            conform.load_adapter("onnxruntime")
            raise AssertionError("engines/onnxruntime found")
        finally:
            os.chdir(SOURCE_DIR)
            if old is not None:
                os.environ["KVSPEC_ENGINES_DIR"] = old
