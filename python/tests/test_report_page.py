"""Verdicts as a page (kvspec.report_page): engines by traces, each failing
cell linking to the failing statement and to its class; opened in headless
Chromium (Debian's chromium, installed by tools/setup), which must be there:
the test fails, saying so, when it is not."""
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from conftest import BUILD_DIR, SOURCE_DIR

ENV = dict(os.environ, PYTHONPATH=os.path.join(BUILD_DIR, "python"))
VERDICTS = os.path.join("engines", "llama.cpp", "verdicts")


class Dom(HTMLParser):
    """The elements of a dumped DOM: (tag, attributes, text inside)."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: List[Tuple[str, Dict[str, str], List[str]]] = []
        self.open: List[Tuple[str, Dict[str, str], List[str]]] = []

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        e: Tuple[str, Dict[str, str], List[str]] = (tag, {k: v or "" for k, v in attrs}, [])
        self.elements.append(e)
        if tag not in ("meta", "br", "link"):
            self.open.append(e)

    def handle_endtag(self, tag: str) -> None:
        while self.open:
            if self.open.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        for e in self.open:
            e[2].append(data)

    def find(self, tag: str, **attrs: str) -> List[Tuple[Dict[str, str], str]]:
        return [(a, "".join(t)) for g, a, t in self.elements
                if g == tag and all(a.get(k.rstrip("_")) == v for k, v in attrs.items())]

    def by_id(self, ident: str) -> str:
        found = [("".join(t)) for _, a, t in self.elements if a.get("id") == ident]
        assert len(found) == 1, (ident, found)
        return found[0]


def chromium_dom(page: Path, tmp_path: Path) -> Dom:
    exe = shutil.which("chromium")
    assert exe, "chromium is not installed: tools/setup installs it (Debian's chromium)"
    p = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu",
                        "--user-data-dir=%s" % (tmp_path / "chromium-profile"),
                        "--dump-dom", page.resolve().as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "<table" in p.stdout, p.stderr[-2000:]
    dom = Dom()
    dom.feed(p.stdout)
    return dom


def test_page_of_two_engines_in_chromium(tmp_path: Path) -> None:
    # A second engine: the naive ring's --json report over a few traces.
    traces = ["corpus/traces/ring_trim.trace", "corpus/traces/kv_trim.trace",
              "corpus/traces/life_extract_padded.trace"]
    p = subprocess.run([sys.executable, "-m", "kvspec.conform", "--adapter", "naive_ring",
                        "--json", *traces], env=ENV, cwd=SOURCE_DIR, capture_output=True,
                       text=True)
    assert p.returncode == 1, p.stderr
    (tmp_path / "naive.json").write_text(p.stdout)
    out = tmp_path / "page"
    p = subprocess.run([sys.executable, "-m", "kvspec.report_page", "--out", str(out),
                        "--root", SOURCE_DIR,
                        "--engine", "llama.cpp=" + os.path.join(VERDICTS, "default.txt"),
                        "--engine", "llama.cpp lenient=" + os.path.join(VERDICTS, "lenient.txt"),
                        "--classes", "llama.cpp=" + os.path.join(VERDICTS, "classes.txt"),
                        "--classes", "llama.cpp lenient=" + os.path.join(VERDICTS, "classes.txt"),
                        "--engine", "naive_ring=" + str(tmp_path / "naive.json")],
                       env=ENV, cwd=SOURCE_DIR, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    dom = chromium_dom(out / "index.html", tmp_path)

    # the engines, in order
    assert [t for _, t in dom.find("th", class_="engine")] == \
        ["llama.cpp", "llama.cpp lenient", "naive_ring"]
    # a row per trace of any engine
    rows = [t for _, t in dom.find("td", class_="trace")]
    with open(os.path.join(SOURCE_DIR, VERDICTS, "default.txt")) as f:
        verdicts = [line.split()[0] for line in f if line.strip() and not line.startswith("#")]
    assert len(rows) == len(verdicts) and "corpus/traces/life_extract_padded.trace" in rows
    # life_extract_padded fails on llama.cpp at line 36, class B2: the cell
    # links to the statement and to the class, which links to the document
    links = [a for a, t in dom.find("a", class_="stmt") if t == "fail:36"]
    assert links, "no fail:36 cell"
    target = links[0]["href"]
    assert target.startswith("#src-") and target.endswith("-L36")
    assert "expect error trim 1" in dom.by_id(target[1:])
    cls = [(a, t) for a, t in dom.find("a", class_="class")
           if t == "B2 recurrent rollback (after a state restore)"]
    assert cls
    legend = dom.by_id(cls[0][0]["href"][1:])
    assert legend.startswith("llama.cpp: B2 recurrent rollback")
    doc = [a["href"] for a, t in dom.find("a") if a.get("href", "").endswith(
        "docs/engines/llama.cpp.md#failure-classes")]
    assert doc and (out / doc[0].split("#")[0]).resolve() == \
        Path(SOURCE_DIR, "docs", "engines", "llama.cpp.md").resolve()
    # the naive ring's column: its JSON verdicts, an unclassified failure
    totals = [t for _, t in dom.find("li", class_="engine-total")]
    assert any(t.startswith("naive_ring: ") and t.endswith(" not applicable") for t in totals)
    assert "llama.cpp: %d passed, %d failed, 0 not applicable" % (
        verdicts.count("pass"), verdicts.count("fail")) in totals, totals
    assert dom.find("span", class_="class unclassified")


def test_conform_html_option(tmp_path: Path) -> None:
    out = tmp_path / "page"
    p = subprocess.run([sys.executable, "-m", "kvspec.conform", "--adapter", "naive_ring",
                        "--html", str(out), "corpus/traces/ring_trim.trace",
                        "corpus/traces/kv_trim.trace"], env=ENV, cwd=SOURCE_DIR,
                       capture_output=True, text=True)
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stdout.splitlines()[-1] == "1 passed, 1 failed, 0 not applicable"
    dom = Dom()
    dom.feed((out / "index.html").read_text())
    assert [t for _, t in dom.find("th", class_="engine")] == ["naive_ring"]
    assert [t for _, t in dom.find("td", class_="pass")] == ["pass"]
    stmt = dom.find("a", class_="stmt")
    assert len(stmt) == 1 and stmt[0][1].startswith("fail:")
    line = int(stmt[0][1].split(":")[1])
    assert stmt[0][0]["href"].endswith("-L%d" % line)
    dom.by_id(stmt[0][0]["href"][1:])


def test_page_of_three_engines_in_chromium(tmp_path: Path) -> None:
    # The checked-in verdicts of the three engines that run the suite.
    files = {"llama.cpp": os.path.join(VERDICTS, "default.txt"),
             "onnxruntime": os.path.join("engines", "onnxruntime", "verdicts", "full.txt"),
             "transformers.js": os.path.join("engines", "transformers.js", "verdicts", "gqa.txt")}
    tjs_classes = os.path.join("engines", "transformers.js", "verdicts", "classes.txt")
    out = tmp_path / "page"
    p = subprocess.run([sys.executable, "-m", "kvspec.report_page", "--out", str(out),
                        "--root", SOURCE_DIR,
                        *[a for name, path in files.items() for a in ("--engine", name + "=" + path)],
                        "--classes", "llama.cpp=" + os.path.join(VERDICTS, "classes.txt"),
                        "--classes", "transformers.js=" + tjs_classes],
                       env=ENV, cwd=SOURCE_DIR, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    dom = chromium_dom(out / "index.html", tmp_path)
    assert [t for _, t in dom.find("th", class_="engine")] == list(files)
    # a row per trace of any engine: the corpus and each engine's minimal traces
    traces = set()
    totals = [t for _, t in dom.find("li", class_="engine-total")]
    for name, path in files.items():
        with open(os.path.join(SOURCE_DIR, path)) as f:
            lines = [l.strip() for l in f if l.strip() and not l.startswith("#")]
        traces |= {l.split()[-1].split(":")[0] for l in lines}
        counts = [sum(1 for l in lines if l.startswith(s + " "))
                  for s in ("pass", "fail", "not applicable")]
        assert "%s: %d passed, %d failed, %d not applicable" % (
            name, counts[0], counts[1], counts[2]) in totals, totals
    assert sorted(t for _, t in dom.find("td", class_="trace")) == sorted(traces)
    # transformers.js's left-padding finding: the failing cell links to the
    # statement and to class B1, whose legend entry links to its document
    src = [a["id"] for a, t in dom.find("section", class_="src")
           if t.startswith("docs/engines/transformers.js-gqa-left-padding.trace")]
    assert len(src) == 1
    links = [a for a, t in dom.find("a", class_="stmt")
             if t == "fail:7" and a["href"] == "#%s-L7" % src[0]]
    assert links and "window 3 left=0,1" in dom.by_id(links[0]["href"][1:])
    cls = [(a, t) for a, t in dom.find("a", class_="class") if t.startswith("B1 GroupQueryAttention")]
    assert cls
    assert dom.by_id(cls[0][0]["href"][1:]).startswith("transformers.js: B1 GroupQueryAttention")
    doc = [a["href"] for a, t in dom.find("a") if a.get("href", "").endswith(
        "docs/engines/transformers.js.md#failure-classes")]
    assert doc and (out / doc[0].split("#")[0]).resolve() == \
        Path(SOURCE_DIR, "docs", "engines", "transformers.js.md").resolve()
