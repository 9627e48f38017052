"""Verdicts as a page: one static HTML page of engines by traces.
``kvspec-conform ... --html DIR`` writes it for one run; this command puts
the saved results of several engines (or settings) side by side:

    python3 -m kvspec.report_page --out DIR --root REPO \\
        --engine NAME=RESULTS [--classes NAME=CLASSES] ...

RESULTS is what an engine's run left: the JSON report of ``kvspec-conform
--json`` (saved with ``> FILE``) or a verdict file of ``pass FILE``, ``fail
FILE:LINE`` and ``not applicable FILE`` lines (engines/llama.cpp/verdicts/).
CLASSES (e.g. engines/llama.cpp/verdicts/classes.txt) gives the class of a
failing verdict: lines ``FILE:LINE ID short name``, and ``# doc: PATH#ANCHOR``
where the classes are defined. ``--engine`` repeats: each is a column.

The page (DIR/index.html, no script, no external resource) has a row per
trace and a column per engine. A failing cell links to the failing statement
(the trace's text, shown below the table with its line numbers) and to its
class (a legend entry that links to the engine's document).
"""

import argparse
import html
import json
import os
import re
import sys
from typing import Dict, List, Optional, Sequence, Tuple


class Verdict:
    """One trace's verdict on one engine."""

    def __init__(self, file: str, status: str, line: Optional[int] = None,
                 message: str = "") -> None:
        self.file = file
        self.status = status  # "pass", "fail", "not applicable" or "crash"
        self.line = line
        self.message = message


class Engine:
    """A column: a name, its verdicts by trace file, the classes of its
    failures (FILE:LINE -> "ID short name") and where they are defined."""

    def __init__(self, name: str, verdicts: Sequence[Verdict],
                 classes: Optional[Dict[str, str]] = None, doc: str = "") -> None:
        self.name = name
        self.verdicts = {v.file: v for v in verdicts}
        self.classes = classes or {}
        self.doc = doc

    def class_of(self, v: Verdict) -> Optional[str]:
        if v.status != "fail":
            return None
        return self.classes.get("%s:%s" % (v.file, v.line) if v.line else v.file)


def _norm(path: str, root: str) -> str:
    """A trace path relative to the repository root, as the verdict files
    write it."""
    if os.path.isabs(path):
        path = os.path.relpath(path, root)
    return os.path.normpath(path)


def load_results(path: str, root: str = ".") -> List[Verdict]:
    """Verdicts from a runner's JSON report or from a verdict file."""
    with open(path) as f:
        text = f.read()
    if text.lstrip().startswith("{"):
        data = json.loads(text)
        return [Verdict(_norm(r["file"], root), r["status"], r.get("line"), r.get("message", ""))
                for r in data["results"]]
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        for status in ("not applicable", "pass", "fail", "crash"):
            if line.startswith(status + " "):
                where = line[len(status) + 1:].split(": ")[0].split(" ")[0]
                m = re.match(r"^(.*):(\d+)$", where)
                if m:
                    out.append(Verdict(_norm(m.group(1), root), status, int(m.group(2))))
                else:
                    out.append(Verdict(_norm(where, root), status))
                break
    return out


def load_classes(path: str) -> Tuple[Dict[str, str], str]:
    """(FILE:LINE -> class, doc link) from a classes file."""
    classes: Dict[str, str] = {}
    doc = ""
    with open(path) as f:
        for raw in f:
            line = raw.strip()
            if line.startswith("# doc:"):
                doc = line[len("# doc:"):].strip()
            elif line and not line.startswith("#"):
                key, _, name = line.partition(" ")
                classes[key] = name.strip()
    return classes, doc


def _id(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")


_STYLE = """
body { font-family: sans-serif; margin: 1em; }
table { border-collapse: collapse; }
td, th { border: 1px solid #bbb; padding: 2px 6px; font-size: 90%; vertical-align: top; }
td.pass { background: #dfd; } td.fail { background: #fdd; } td.na { background: #eee; }
td.crash { background: #f99; } td.none { background: #fff; }
pre { margin: 0; } .src span { display: block; } .src span:target { background: #ff8; }
.src span.failing { background: #fcc; } .no { color: #888; display: inline-block; width: 3em; }
"""


def render(engines: Sequence[Engine], root: str, out_dir: str,
           title: str = "kvspec verdicts") -> str:
    """The page's HTML."""
    files = sorted({f for e in engines for f in e.verdicts})
    failing = [f for f in files if any(
        e.verdicts.get(f) is not None and e.verdicts[f].status in ("fail", "crash")
        for e in engines)]
    src_id = {f: "src-%d" % i for i, f in enumerate(failing)}
    h = html.escape
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'><title>%s</title>" % h(title),
           "<style>%s</style></head><body>" % _STYLE, "<h1>%s</h1>" % h(title)]
    totals = []
    for e in engines:
        counts = {s: sum(v.status == s for v in e.verdicts.values())
                  for s in ("pass", "fail", "not applicable", "crash")}
        totals.append("<li class='engine-total'>%s: %d passed, %d failed, %d not applicable"
                      "%s</li>" % (
            h(e.name), counts["pass"], counts["fail"] + counts["crash"], counts["not applicable"],
            " (%d crashed)" % counts["crash"] if counts["crash"] else ""))
    out.append("<ul>%s</ul>" % "".join(totals))
    out.append("<table id='verdicts'><thead><tr><th>trace</th>%s</tr></thead><tbody>" % "".join(
        "<th class='engine'>%s</th>" % h(e.name) for e in engines))
    used: Dict[Tuple[str, str], str] = {}  # (engine, class) -> legend id
    for f in files:
        cells = []
        for e in engines:
            v = e.verdicts.get(f)
            if v is None:
                cells.append("<td class='none'></td>")
                continue
            if v.status == "pass":
                cells.append("<td class='pass'>pass</td>")
                continue
            if v.status == "not applicable":
                cells.append("<td class='na' title='%s'>not applicable</td>" % h(v.message, True))
                continue
            target = src_id[f] + ("-L%d" % v.line if v.line else "")
            label = "%s:%d" % (v.status, v.line) if v.line else v.status
            cell = "<a class='stmt' href='#%s' title='%s'>%s</a>" % (
                target, h(v.message or "the failing statement", True), h(label))
            cls = e.class_of(v)
            if cls:
                key = (e.name, cls)
                used.setdefault(key, "class-%s-%s" % (_id(e.name), _id(cls)))
                cell += " <a class='class' href='#%s'>%s</a>" % (used[key], h(cls))
            else:
                cell += " <span class='class unclassified'>unclassified</span>"
            cells.append("<td class='%s'>%s</td>" % ("crash" if v.status == "crash" else "fail",
                                                      cell))
        out.append("<tr><td class='trace'>%s</td>%s</tr>" % (h(f), "".join(cells)))
    out.append("</tbody></table>")
    if used:
        out.append("<h2>Classes</h2><ul id='classes'>")
        for (engine, cls), ident in sorted(used.items(), key=lambda kv: kv[1]):
            doc = next((e.doc for e in engines if e.name == engine), "")
            link = ""
            if doc:
                path, _, anchor = doc.partition("#")
                rel = os.path.relpath(os.path.join(root, path), out_dir)
                link = " (<a href='%s'>%s</a>)" % (h(rel + ("#" + anchor if anchor else ""), True),
                                                   h(doc))
            out.append("<li id='%s'>%s: %s%s</li>" % (ident, h(engine), h(cls), link))
        out.append("</ul>")
    out.append("<h2>Failing traces</h2>")
    for f in failing:
        fails = {e.verdicts[f].line for e in engines
                 if f in e.verdicts and e.verdicts[f].status in ("fail", "crash")}
        try:
            with open(os.path.join(root, f)) as fh:
                lines = fh.read().splitlines()
        except OSError:
            lines = []
        out.append("<section class='src' id='%s'><h3>%s</h3><pre>" % (src_id[f], h(f)))
        for i, text in enumerate(lines, 1):
            out.append("<span id='%s-L%d'%s><span class='no'>%d</span>%s</span>" % (
                src_id[f], i, " class='failing'" if i in fails else "", i, h(text)))
        out.append("</pre></section>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_page(out_dir: str, engines: Sequence[Engine], root: str = ".",
               title: str = "kvspec verdicts") -> str:
    """Writes DIR/index.html; returns its path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "index.html")
    with open(path, "w") as f:
        f.write(render(engines, os.path.abspath(root), os.path.abspath(out_dir), title))
    return path


def _pairs(values: Sequence[str], option: str) -> List[Tuple[str, str]]:
    out = []
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            raise SystemExit("%s: expected NAME=FILE, got %r" % (option, v))
        out.append((name, path))
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m kvspec.report_page",
                                 description="Writes one page of engines by traces.")
    ap.add_argument("--out", required=True, metavar="DIR", help="where index.html is written")
    ap.add_argument("--root", default=".", help="the repository the trace paths are relative to")
    ap.add_argument("--engine", action="append", default=[], metavar="NAME=RESULTS",
                    help="a column: a runner's --json report or a verdict file (repeatable)")
    ap.add_argument("--classes", action="append", default=[], metavar="NAME=CLASSES",
                    help="the classes of an engine's failures (repeatable)")
    ap.add_argument("--title", default="kvspec verdicts")
    args = ap.parse_args(argv)
    if not args.engine:
        ap.error("no --engine given")
    classes = {name: load_classes(path) for name, path in _pairs(args.classes, "--classes")}
    engines = []
    for name, path in _pairs(args.engine, "--engine"):
        cls, doc = classes.get(name, ({}, ""))
        engines.append(Engine(name, load_results(path, args.root), cls, doc))
    print(write_page(args.out, engines, args.root, args.title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
