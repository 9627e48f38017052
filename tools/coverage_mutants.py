#!/usr/bin/env python3
"""Crosses a coverage report with tools/mutate's candidate mutants.

usage: tools/coverage_mutants.py LCOV MUTANTS EQUIVALENT OUT

LCOV is `llvm-cov export -format=lcov` of the library (tools/coverage
--mutants writes it), MUTANTS the output of `tools/mutate --sample 0
--list`, EQUIVALENT tools/mutate-equivalent.txt. A candidate mutant on a
line the tests never ran, or on a line with a condition one of whose
outcomes (true or false) the tests never produced, survives unless a test
kills it some other way (a death test: its forked child writes no
profile). Writes every such candidate to OUT, one line each
(`never-run` or `outcome-never-seen`, id, operator, file:line, the
branch counts), and prints the counts per file and a last line

  candidate mutants in coverage gaps: N of T (P%); E of them listed equivalent
"""
import collections
import os
import re
import sys


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    lcov, mutants, equivalent, out_path = sys.argv[1:]
    lines = collections.defaultdict(dict)
    branches = collections.defaultdict(lambda: collections.defaultdict(list))
    source = None
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(lcov) as f:
        for row in f:
            if row.startswith("SF:"):
                source = os.path.relpath(os.path.normpath(row[3:].strip()), root)
            elif row.startswith("DA:"):
                number, count = row[3:].strip().split(",")[:2]
                lines[source][int(number)] = lines[source].get(int(number), 0) + int(count)
            elif row.startswith("BRDA:"):
                number, _, _, taken = row[5:].strip().split(",")
                branches[source][int(number)].append(0 if taken == "-" else int(taken))
    listed = set()
    with open(equivalent) as f:
        for row in f:
            m = re.match(r"([0-9a-f]{10}) ", row)
            if m:
                listed.add(m.group(1))
    total = collections.Counter()
    gaps = collections.Counter()
    found = []
    with open(mutants) as f:
        for row in f:
            m = re.match(r"^--- ([0-9a-f]{10}) (\w+) (\S+):(\d+)", row)
            if not m:
                continue
            mid, op, path, number = m.group(1), m.group(2), m.group(3), int(m.group(4))
            total[path] += 1
            if lines[path].get(number) == 0:
                kind = "never-run"
            elif 0 in branches[path].get(number, []):
                kind = "outcome-never-seen"
            else:
                continue
            gaps[path] += 1
            found.append((kind, mid, op, path, number, branches[path].get(number, [])))
    with open(out_path, "w") as out:
        for kind, mid, op, path, number, counts in found:
            eq = " (listed equivalent)" if mid in listed else ""
            out.write(f"{kind} {mid} {op} {path}:{number} {counts}{eq}\n")
    for path in sorted(total, key=lambda p: (-gaps[p], p)):
        if gaps[path]:
            print(f"  {path}: {gaps[path]} of {total[path]}")
    n, t = len(found), sum(total.values())
    e = sum(1 for g in found if g[1] in listed)
    print(f"candidate mutants in coverage gaps: {n} of {t} ({100.0 * n / max(t, 1):.1f}%); "
          f"{e} of them listed equivalent")


if __name__ == "__main__":
    main()
