"""The conformance runner with the shipped adapters, over the whole corpus."""
import glob
import io
import json
import os
import subprocess
import sys
import textwrap

import pytest

import kvspec
from kvspec import conform, program
from kvspec.adapters import numpy_cache
from conftest import BUILD_DIR, SOURCE_DIR

TRACES = sorted(glob.glob(os.path.join(SOURCE_DIR, "corpus/traces/*.trace"))) + \
    sorted(glob.glob(os.path.join(SOURCE_DIR, "corpus/traces/conformance/*.trace")))


def kinds(path):
    return {layer.kind for layer in program.load(path).layers}


def run(adapter, files=TRACES, **kw):
    out = io.StringIO()
    results = conform.run(adapter, files, out=out, **kw)
    return results, out.getvalue()


def test_corpus_is_there():
    assert len(TRACES) > 90


def test_reference_passes_every_trace():
    results, text = run("kvspec.adapters.reference")
    assert [r.text() for r in results if r.status != "pass"] == []
    assert text.splitlines()[-1] == "%d passed, 0 failed, 0 not applicable" % len(TRACES)
    assert "compared with kvspec's core" in text


def test_numpy_cache_passes_every_attention_trace():
    results, _ = run("kvspec.adapters.numpy_cache")
    assert [r.text() for r in results if r.status == "fail"] == []
    for r in results:
        has_ssm = "ssm" in kinds(r.path)
        assert (r.status == "not applicable") == has_ssm, r.text()
        if has_ssm:
            assert "ssm" in r.message
    assert sum(r.status == "pass" for r in results) > 50


def test_naive_ring_is_caught_on_the_ring_traces():
    results, text = run("kvspec.adapters.naive_ring")
    failed = [r for r in results if r.status == "fail"]
    assert len(failed) >= 15
    for r in failed:
        assert "rotating" in kinds(r.path), r.text()
        assert isinstance(r.line, int) and r.line > 0
        assert r.text().startswith("fail %s:%d: " % (r.path, r.line))
    for r in results:
        if "rotating" not in kinds(r.path):
            assert r.status != "fail", r.text()
    by_name = {os.path.relpath(r.path, os.path.join(SOURCE_DIR, "corpus/traces")): r
               for r in failed}
    # The classic symptom: a rejected tip still visible beside the token
    # rewritten at its position.
    tip = by_name["ring_verify_longer_than_window.trace"]
    assert "8:108 8:208" in tip.message
    assert by_name["ring_trim.trace"].message.startswith("differs from the reference: expected "
                                                         "a refusal")
    print(text)


def test_naive_ring_caught_by_the_traces_alone():
    results, _ = run("kvspec.adapters.naive_ring", compare=False)
    failed = [r for r in results if r.status == "fail"]
    assert len(failed) >= 15
    assert all(r.line for r in failed)


def test_json_report_and_cli_exit_status():
    ring = [t for t in TRACES if t.endswith("/ring_trim.trace")]
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD_DIR, "python"))
    cmd = [sys.executable, "-m", "kvspec.conform", "--json", "--adapter"]
    p = subprocess.run(cmd + ["kvspec.adapters.naive_ring"] + ring, env=env,
                       capture_output=True, text=True)
    assert p.returncode == 1, p.stderr
    report = json.loads(p.stdout)
    assert report["failed"] == 1 and report["results"][0]["status"] == "fail"
    assert report["results"][0]["line"] > 0
    p = subprocess.run([sys.executable, "-m", "kvspec.conform", "--adapter",
                        "kvspec.adapters.numpy_cache"] + ring, env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.splitlines()[-1] == "1 passed, 0 failed, 0 not applicable"


def test_module_alone_means_module_adapter(tmp_path, monkeypatch):
    (tmp_path / "my_engine.py").write_text(textwrap.dedent("""
        from kvspec.adapters.numpy_cache import Adapter
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    results, _ = run("my_engine", TRACES[:3])
    assert all(r.status != "fail" for r in results)
    results, _ = run("my_engine:Adapter", TRACES[:1])
    assert results[0].status != "fail"


class NoRounds(numpy_cache.Adapter):
    def arm(self, c):
        raise kvspec.NotApplicable("this engine has no speculative rounds")


class WrongBytes(numpy_cache.Adapter):
    def bytes_per_token(self, c, layer):
        return 1


class ChangesWhenRefusing(numpy_cache.Adapter):
    def trim(self, c, n, bypass):
        c.next[0] += 1
        super().trim(c, n, bypass)


class Crashes(numpy_cache.Adapter):
    def forward(self, *args):
        raise ZeroDivisionError("boom")


def test_not_applicable_is_reported_with_its_reason():
    path = [t for t in TRACES if t.endswith("/kv_spec_rounds.trace")]
    results, text = run(NoRounds, path)
    assert results[0].status == "not applicable"
    assert "not applicable %s: this engine has no speculative rounds" % path[0] in text
    assert text.splitlines()[-1] == "0 passed, 0 failed, 1 not applicable"


def test_divergence_from_the_reference_names_line_expected_and_got():
    path = [t for t in TRACES if t.endswith("/kv_decode.trace")]
    results, _ = run(WrongBytes, path)
    r = results[0]
    assert r.status == "fail" and r.line == 7  # the header's last line
    assert r.message == "differs from the reference: bytes_per_token a expected 32 got 1"
    # Without the reference, a trace without bytes_per_token lines passes.
    results, _ = run(WrongBytes, path, compare=False)
    assert results[0].status == "pass"


def test_a_refusal_that_changes_state_is_caught():
    path = [t for t in TRACES if t.endswith("/kv_trim_refusals.trace")]
    results, _ = run(ChangesWhenRefusing, path, compare=False)
    assert results[0].status == "fail"
    assert "unchanged after the refusal" in results[0].message


def test_an_adapter_exception_fails_the_trace_not_the_runner():
    results, _ = run(Crashes, TRACES[:2])
    assert all(r.status == "fail" and "ZeroDivisionError" in r.message for r in results)


def test_emitted_json_gives_the_same_verdicts_as_the_trace():
    emitted = sorted(glob.glob(os.path.join(SOURCE_DIR, "corpus/emitted/**/*.json"),
                               recursive=True))
    assert len(emitted) == len(TRACES)
    a, _ = run("kvspec.adapters.naive_ring", compare=False)
    b, _ = run("kvspec.adapters.naive_ring", emitted, compare=False)
    key = lambda r: os.path.relpath(r.file, SOURCE_DIR) if os.path.isabs(r.file) else r.file
    assert sorted((key(r), r.status, r.line) for r in a) == \
        sorted((key(r), r.status, r.line) for r in b)
