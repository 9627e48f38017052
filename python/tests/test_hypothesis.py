"""kvspec.hypothesis: random programs against kvspec's core."""
import os
import subprocess
import sys

from kvspec import conform
from kvspec import hypothesis as khyp
from conftest import BUILD_DIR


def test_naive_ring_is_found_and_shrunk(tmp_path):
    out = tmp_path / "report.txt"
    with open(out, "w") as f:
        failed = khyp.run_random("kvspec.adapters.naive_ring", 300, seed=1, max_steps=20,
                                 out=f, database=str(tmp_path / "db"),
                                 failure_dir=str(tmp_path))
    text = out.read_text()
    print(text)
    assert failed == 1
    trace = tmp_path / "kvspec-random-1.trace"
    body = [line for line in trace.read_text().splitlines()
            if line and not line.startswith(("#", "trace", "rows", "layer"))]
    assert 1 <= len(body) <= 6, body
    assert "rotating" in trace.read_text()
    assert text.splitlines()[-1].endswith("1 failed, 0 not applicable")
    # The printed trace reproduces the failure with the runner, and only for
    # the naive ring.
    import io
    results = conform.run("kvspec.adapters.naive_ring", [str(trace)], out=io.StringIO())
    assert results[0].status == "fail" and results[0].line
    results = conform.run("kvspec.adapters.numpy_cache", [str(trace)], out=io.StringIO())
    assert results[0].status == "pass"
    # Kept in the example database: the next run replays it first.
    assert any(files for _, _, files in os.walk(tmp_path / "db"))


def test_numpy_cache_survives_random_programs(tmp_path):
    import io
    out = io.StringIO()
    failed = khyp.run_random("kvspec.adapters.numpy_cache", 60, seed=3, max_steps=15, out=out,
                             database=str(tmp_path / "db"), failure_dir=str(tmp_path))
    assert failed == 0, out.getvalue()
    assert out.getvalue().splitlines()[-1].endswith(" passed, 0 failed, 0 not applicable")


def test_cli_random_exit_status(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(BUILD_DIR, "python"))
    p = subprocess.run([sys.executable, "-m", "kvspec.conform", "--adapter",
                        "kvspec.adapters.reference", "--random", "20", "--seed", "4",
                        "--max-steps", "8"], env=env, cwd=tmp_path, capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert " passed, 0 failed, 0 not applicable" in p.stdout.splitlines()[-1]
