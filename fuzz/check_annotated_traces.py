#!/usr/bin/env python3
"""Checks the traces fuzz_layout_ops annotates for triage.

For every input of the given corpus directories, runs the replay binary with
KVSPEC_FUZZ_PRINT_TRACE=1, takes the `==== annotated trace (model), exit N`
block (the program with the model's `expect sees` lines written in after
every forward), runs it through `kvspec trace` and checks the exit status is
N. Fails on the first mismatch, printing the input and the trace's errors;
fails too when no input produced a block or a block held no expectation.

usage: check_annotated_traces.py REPLAY_BINARY KVSPEC_BINARY DIR...
"""
import os
import re
import subprocess
import sys
import tempfile

BLOCK = re.compile(r"^==== annotated trace \(model\), exit (\d+)\n(.*?)^====\n", re.S | re.M)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    replay, kvspec, dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
    inputs = sorted(os.path.join(d, f) for d in dirs if os.path.isdir(d)
                    for f in os.listdir(d) if os.path.isfile(os.path.join(d, f)))
    env = dict(os.environ, KVSPEC_FUZZ_PRINT_TRACE="1")
    checked = expectations = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "annotated.trace")
        for source in inputs:
            run = subprocess.run([replay, source], env=env, capture_output=True, text=True,
                                 timeout=300)
            if run.returncode != 0:
                sys.exit("%s: the replay failed (exit %d):\n%s"
                         % (source, run.returncode, run.stderr[-2000:]))
            match = BLOCK.search(run.stderr)
            if not match:
                continue  # skipped inputs (too short, known issues) print none
            want, text = int(match.group(1)), match.group(2)
            expectations += text.count("\nexpect sees ")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            got = subprocess.run([kvspec, "trace", path], capture_output=True, text=True,
                                 timeout=300)
            if got.returncode != want:
                sys.exit("%s: the annotated trace exits %d under kvspec trace, the model says "
                         "%d:\n%s\n---- trace\n%s" % (source, got.returncode, want,
                                                      got.stderr[-2000:], text))
            checked += 1
    if checked == 0 or expectations == 0:
        sys.exit("no annotated trace with expectations in %s" % " ".join(dirs))
    print("%d annotated traces (%d expect sees lines) exit as the model says"
          % (checked, expectations))


if __name__ == "__main__":
    main()
