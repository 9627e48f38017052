"""kvspec.hypothesis --keep-going: a random run that goes on after failures,
shrinks each new failure class once and counts the rest (fake adapters built
on kvspec's core, so the run is fast and deterministic)."""
import io
import os
import re
import subprocess
import sys

from kvspec import conform
from kvspec import hypothesis as khyp
from kvspec.adapters.reference import Adapter as Reference
from kvspec.errors import Refused
from conftest import BUILD_DIR


class Faulty(Reference):
    """kvspec's core with two planted faults: every reload is refused, and
    extract raises (an adapter error)."""

    def reload(self, h):
        raise Refused("planted: reload refused")

    def extract(self, h, row):
        raise RuntimeError("planted: extract broken")


def _run(tmp_path, n, seed, progress=0):
    out = io.StringIO()
    failed = khyp.run_random(Faulty, n, seed=seed, max_steps=8, out=out,
                             failure_dir=str(tmp_path / "shrunk"), kinds=("kv-full",),
                             keep_going=True, progress=progress)
    return failed, out.getvalue()


def test_keep_going_classifies_and_continues(tmp_path):
    failed, text = _run(tmp_path, 120, seed=7)
    print(text)
    lines = text.splitlines()
    # the run reached its examples though examples failed
    head = [l for l in lines if l.startswith("# ") and " examples in " in l]
    assert len(head) == 1
    examples = int(head[0].split()[1])
    assert examples >= 120
    passed, nfail, na = [int(w) for w in lines[-1].replace(",", "").split()[0:6:2]]
    assert lines[-1] == "%d passed, %d failed, %d not applicable" % (passed, nfail, na)
    assert passed + nfail + na == examples
    assert failed == nfail and nfail > 2 and passed > 0
    # one shrunk trace per class, each class counted
    matches = [re.match(r"^# class (.*): (\d+) examples failed; shrunk: (\S+); (.*)$", l)
               for l in lines if l.startswith("# class ")]
    assert all(matches), lines
    classes = [m for m in matches if m is not None]
    sigs = sorted(m.group(1) for m in classes)
    assert any("reload | differs from the reference: expected the operation to be accepted "
               "got refused" in s for s in sigs), sigs
    assert any("extract | RuntimeError: planted: extract broken" in s for s in sigs), sigs
    assert len(classes) == len(os.listdir(tmp_path / "shrunk")) == 2
    assert sum(int(m.group(2)) for m in classes) == nfail
    assert sorted(os.path.basename(m.group(3)) for m in classes) == \
        sorted(os.listdir(tmp_path / "shrunk"))
    for path in os.listdir(tmp_path / "shrunk"):
        trace = str(tmp_path / "shrunk" / path)
        body = open(trace).read()
        assert "# class: new" in body and "# signature: " in body
        stmts = [l for l in body.splitlines()
                 if l and not l.startswith(("#", "trace", "rows", "layer"))]
        assert 1 <= len(stmts) <= 2, body  # shrunk: the failing statement (and a fork)
        # the stored trace reproduces with the runner, for the faulty adapter only
        assert conform.run(Faulty, [trace], out=io.StringIO())[0].status == "fail"
        assert conform.run(Reference, [trace], out=io.StringIO())[0].status == "pass"


def test_keep_going_shrinks_to_the_same_traces(tmp_path):
    # The failure counts may differ between two runs of the same seed
    # (Hypothesis' generation is not bit-for-bit repeatable), the minimal
    # traces do not.
    def shrunk(d):  # the traces, in any order (which class is found first may vary)
        out = []
        for name in os.listdir(d):
            lines = open(os.path.join(d, name)).read().splitlines()
            out.append([l for l in lines if not l.startswith("# found by")])
        return sorted(out)
    # Enough examples that both planted faults are met in each run: with 60,
    # a run under load once met only the reload fault (Hypothesis' example
    # counts are not repeatable, see above), so the lists differed in length.
    _run(tmp_path / "a", 200, seed=3)
    _run(tmp_path / "b", 200, seed=3)
    a, b = shrunk(tmp_path / "a" / "shrunk"), shrunk(tmp_path / "b" / "shrunk")
    assert len(a) == 2 and a == b


def test_progress_lines(tmp_path):
    failed, text = _run(tmp_path, 30, seed=2, progress=1e-9)
    progress = [l for l in text.splitlines() if l.startswith("# progress: ")]
    assert len(progress) >= 30, text
    assert " examples, " in progress[-1] and " failed (" in progress[-1]


def test_signature_is_stable():
    sig = khyp.signature
    a = sig({"op": "trim"}, "differs from the reference: positions expected [8, 10] got [0, 10]")
    b = sig({"op": "trim"}, "differs from the reference (layout b): positions expected [1] got "
            "[0]")
    assert a == b == "trim | differs from the reference: positions expected N got N"
    c = sig({"op": "decode"}, "differs from the reference: sees l0 r0 p5: expected 3 4:104 "
            "5:205 got 4:104 5:205")
    d = sig({"op": "decode"}, "differs from the reference: sees l1 r2 p17: expected 0 got 0 1:7")
    assert c == d == "decode | differs from the reference: sees lN rN pN: expected N got N"
    e = sig({"op": "expect error", "inner": {"op": "trim"}}, "expected the layout unchanged "
            "after the refusal (llama_memory_seq_rm(seq 1, 1, -1) returned false (recurrent)) "
            "got a change: positions [8, 10] vs [0, 10]")
    assert e == ("expect error trim | expected the layout unchanged after the refusal got a "
                 "change: positions N vs N")
    assert sig({"op": "trim"}, "x") != sig({"op": "accept"}, "x")


def test_known_classes(monkeypatch):
    l2 = "trace 1\nrows 1\nlayer l0 rotating window=1 capacity=1\ndecode\nextract 0 as b\n"
    monkeypatch.setattr(khyp, "SETTINGS", {"seq_cp": "1"})
    assert khyp.classify(l2, "differs from the reference: positions expected [1] got [0]") \
        .startswith("L2")
    monkeypatch.setattr(khyp, "SETTINGS", {})
    assert khyp.classify(l2, "differs from the reference: positions expected [1] got [0]") \
        .startswith("L1")
    undo = "trace 1\nrows 1\nlayer l0 kv window=1\narm\nwindow 2\nexpect error arm\naccept 1\n"
    assert khyp.classify(undo, "differs from the reference: positions expected [1] got [0]") \
        .startswith("L1")
    l1 = "trace 1\nrows 1\nlayer l0 rotating window=2 capacity=3\ndecode\nfork b\ntrim 1\n"
    assert khyp.classify(l1, "differs from the reference: positions expected [1] got [0]") \
        .startswith("L1")
    b2 = "trace 1\nrows 1\nlayer l0 ssm conv=4\narm\nwindow 3\naccept 0\nexpect equal b\n"
    assert khyp.classify(b2, "expected equal b got row 0: llama_state_seq_get_data differs") \
        .startswith("B2")
    assert khyp.classify("trace 1\nrows 1\nlayer l0 kv\ndecode\n", "something else") == "new"


def test_cli_keep_going(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD_DIR, "python"))
    p = subprocess.run([sys.executable, "-m", "kvspec.conform", "--adapter",
                        "kvspec.adapters.reference", "--random", "15", "--seed", "4",
                        "--max-steps", "6", "--keep-going", "--out", str(tmp_path / "o"),
                        "--kinds", "kv-full,ssm"], env=env, cwd=tmp_path, capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines()[-1].endswith(" passed, 0 failed, 0 not applicable")
    p = subprocess.run([sys.executable, "-m", "kvspec.conform", "--adapter",
                        "kvspec.adapters.reference", "--random", "5", "--kinds", "kv,bogus"],
                       env=env, cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 2 and "unknown kind bogus" in p.stderr


def test_time_budget_stops_between_segments(tmp_path):
    out = io.StringIO()
    failed = khyp.run_random(Reference, 1000, seed=1, max_steps=4, out=out,
                             failure_dir=str(tmp_path), kinds=("kv-full",), keep_going=True,
                             progress=0, time_budget=1e-9)
    lines = out.getvalue().splitlines()
    assert failed == 0
    head = [l for l in lines if " examples in " in l][0]
    examples = int(head.split()[1])
    assert khyp.CHUNK <= examples < 1000, head  # one segment, then the budget
    assert "stopped by the time budget of 1e-09 s before 1000 examples" in head
    assert lines[-1] == "%d passed, 0 failed, 0 not applicable" % examples


def test_shrink_time_limit(tmp_path):
    # with a limit of ~0 s the first failing program is kept nearly as found
    out = io.StringIO()
    failed = khyp.run_random(Faulty, 40, seed=7, max_steps=8, out=out,
                             failure_dir=str(tmp_path), kinds=("kv-full",), keep_going=True,
                             progress=0, shrink_seconds=1e-9)
    assert failed > 0
    traces = [open(os.path.join(tmp_path, n)).read() for n in os.listdir(tmp_path)]
    assert traces and all("# shrinking stopped after 1e-09 s" in t for t in traces)
    # each still reproduces with the runner
    for n in os.listdir(tmp_path):
        assert conform.run(Faulty, [str(tmp_path / n)], out=io.StringIO())[0].status == "fail"
