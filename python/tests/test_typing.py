"""The type check catches real mistakes against the public API: a small
program misusing kvspec (Layout, Adapter, the runner's entry points) fails
mypy with the package's settings, one error per planted mistake, while the
same program used correctly passes."""
import os
import re
import subprocess
import sys
import textwrap

from conftest import SOURCE_DIR

PYTHON_DIR = os.path.join(SOURCE_DIR, "python")

GOOD = textwrap.dedent("""\
    from typing import List
    import kvspec
    from kvspec import conform
    from kvspec.adapter import Adapter, ForwardResult
    from kvspec.program import Layer

    class Mine(Adapter):
        def create(self, rows: int, layers: List[Layer]) -> object:
            return [0] * rows

        def positions(self, cache: object) -> List[int]:
            return [0]

    layout = kvspec.Layout(2, [kvspec.LayerConfig("a", "kv", heads=2, dim=8)])
    positions: List[int] = layout.positions()
    kind: str = layout.kind(0)
    results = conform.run(Mine, ["x.trace"], compare=False)
    status: str = results[0].status
    code: int = conform.main(["--help"])
    seen = ForwardResult({(0, 0, 0): [(0, 0), "pad"]})
    """)

# Each line is a mistake; mypy must report an error on each of them.
BAD = GOOD + textwrap.dedent("""\
    kvspec.Layout("2", [kvspec.LayerConfig("a")])
    kvspec.Layout(2, kvspec.LayerConfig("a"))
    layout.trim(n="1")
    total: int = layout.positions()
    conform.run(Mine, "one.trace", compare="no")
    conform.run_file(["x.trace"], Mine)
    name: int = conform.run(Mine, [])[0].status
    ForwardResult({(0, 0): [(0, 0)]})
    """)


def mypy(tmp_path, text):
    path = tmp_path / "use_kvspec.py"
    path.write_text(text)
    env = dict(os.environ, MYPYPATH=PYTHON_DIR)
    p = subprocess.run([sys.executable, "-m", "mypy", "--config-file",
                        os.path.join(PYTHON_DIR, "pyproject.toml"),
                        "--cache-dir", str(tmp_path / "cache"), "--no-error-summary",
                        str(path)], env=env, cwd=tmp_path, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def test_correct_use_passes(tmp_path):
    code, out = mypy(tmp_path, GOOD)
    assert code == 0, out


def test_every_mistake_is_an_error(tmp_path):
    code, out = mypy(tmp_path, BAD)
    assert code == 1, out
    first = len(GOOD.splitlines()) + 1
    wanted = set(range(first, len(BAD.splitlines()) + 1))
    lines = {int(m.group(1)) for m in re.finditer(r"use_kvspec\.py:(\d+): error:", out)}
    assert wanted <= lines, "mistakes not reported on lines %s:\n%s" % (
        sorted(wanted - lines), out)
    assert lines <= wanted, out
