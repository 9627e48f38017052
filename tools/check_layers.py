#!/usr/bin/env python3
"""Checks that the library's layers hold: no file includes, directly or
through the headers it includes, from a folder its layer may not use.

    python3 tools/check_layers.py [ROOT]     # ROOT: the source tree (default: this checkout)

Exit status 0 when every rule holds; 1 with one line per violation, naming
the file, the include chain and the rule; 2 on bad usage.

The rules (folder: what it may include of the project; tests excluded where
said):
- base/:    base/ only
- kernels/: base/, kernels/ (its tests also testing/)
- core/:    base/, kernels/, core/ (core/codec too); never trace/ or runner/
- trace/:   base/, trace/ (the format knows no caches or kernels)
- the oracle (testing/values_oracle.*): nothing from core/ or kernels/
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]kvspec/([^">]+)[">]', re.MULTILINE)
SOURCE_SUFFIXES = (".h", ".cc")


@dataclass(frozen=True)
class Rule:
    name: str
    applies: str              # folder prefix of the files the rule checks
    allowed: Tuple[str, ...]  # folder prefixes their includes may come from
    tests_too: bool = True    # also *_test.cc files of the folder
    test_extra: Tuple[str, ...] = ()  # more prefixes its tests may include


RULES: Tuple[Rule, ...] = (
    Rule("base includes only base/", "base/", ("base/",)),
    Rule("kernels/ includes only base/ and kernels/", "kernels/",
         ("base/", "kernels/"), test_extra=("testing/",)),
    Rule("core/ includes only base/, kernels/ and core/ (no trace/ or runner/)", "core/",
         ("base/", "kernels/", "core/"), tests_too=False),
    Rule("trace/ (the format) includes only base/ and trace/", "trace/",
         ("base/", "trace/"), tests_too=False),
    Rule("the oracle includes nothing from core/ or kernels/", "testing/values_oracle",
         ("base/", "trace/", "testing/")),
)


def is_test(path: str) -> bool:
    return path.endswith("_test.cc") or "/tests/" in path or path.endswith("_test_util.h")


def project_sources(root: Path) -> List[str]:
    found = []
    for directory, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(directory, root)
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "node_modules")]
        for name in files:
            if name.endswith(SOURCE_SUFFIXES):
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                found.append(rel.replace(os.sep, "/"))
    return sorted(found)


def includes_of(root: Path, path: str, cache: Dict[str, List[str]]) -> List[str]:
    if path not in cache:
        try:
            text = (root / path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        cache[path] = INCLUDE.findall(text)
    return cache[path]


def first_violation(root: Path, start: str, allowed: Sequence[str],
                    cache: Dict[str, List[str]]) -> Optional[List[str]]:
    """The include chain from `start` to the first project file outside
    `allowed`, or None. Headers are followed transitively."""
    seen = {start}
    stack: List[Tuple[str, List[str]]] = [(start, [start])]
    while stack:
        path, chain = stack.pop()
        for included in includes_of(root, path, cache):
            if not included.startswith(tuple(allowed)):
                return chain + [included]
            if included not in seen and (root / included).is_file():
                seen.add(included)
                stack.append((included, chain + [included]))
    return None


def check(root: Path, rules: Iterable[Rule] = RULES) -> List[str]:
    cache: Dict[str, List[str]] = {}
    sources = project_sources(root)
    problems = []
    for rule in rules:
        for path in sources:
            if not path.startswith(rule.applies):
                continue
            test = is_test(path)
            if test and not rule.tests_too:
                continue
            allowed = rule.allowed + (rule.test_extra if test else ())
            chain = first_violation(root, path, allowed, cache)
            if chain:
                problems.append(f"{path}: includes {' -> '.join(chain[1:])}: {rule.name}")
    return problems


def main(argv: Sequence[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip())
        return 0
    if len(argv) > 1:
        print("usage: check_layers.py [ROOT] (see --help)", file=sys.stderr)
        return 2
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent
    if not root.is_dir():
        print(f"check_layers.py: {root}: not a folder", file=sys.stderr)
        return 2
    problems = check(root)
    for line in problems:
        print(line)
    count = len(project_sources(root))
    print(f"check_layers: {count} files, {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
