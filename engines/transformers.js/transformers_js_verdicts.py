#!/usr/bin/env python3
"""Runs kvspec's corpus (and the random mode) against transformers.js in one
export convention and compares the verdicts with a checked-in file, so that
a change on either side (the corpus, kvspec's core, the adapter, the pinned
@huggingface/transformers) shows.

    transformers_js_verdicts.py --repo DIR --export E --check FILE    # the ctest (label engine)
    transformers_js_verdicts.py --repo DIR --export E --write FILE    # regenerate FILE
    transformers_js_verdicts.py --repo DIR --export E --random N [--seed S] [--out DIR]
                                               [--expect-random reported]

Needs kvspec's compiled module on PYTHONPATH and
engines/transformers.js/node_modules (tools/setup). Each trace's verdict is
`pass FILE`, `fail FILE:LINE` or `not applicable FILE`; the corpus runner
and the shrunk-trace check are onnxruntime_verdicts.py's. Fails with a
message, never skips, when the engine is missing.
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "onnxruntime"))
from onnxruntime_verdicts import run_corpus  # noqa: E402

EXPORTS = ("plain", "gqa")


def corpus(repo: str) -> List[str]:
    files = sorted(glob.glob(os.path.join(repo, "corpus", "traces", "*.trace")))
    files += sorted(glob.glob(os.path.join(repo, "corpus", "traces", "conformance", "*.trace")))
    # the minimal traces of docs/engines/transformers.js.md
    files += sorted(glob.glob(os.path.join(repo, "docs", "engines", "transformers.js-*.trace")))
    return [os.path.relpath(f, repo) for f in files]


def adapter_args(export: str) -> List[str]:
    return ["--adapter", "transformers_js", "--setting", "export=" + export]


def check_engine(repo: str, env: Dict[str, str]) -> Optional[str]:
    for need in (os.path.join("@huggingface", "transformers", "package.json"),
                 os.path.join("onnxruntime-node", "bin", "napi-v6", "linux", "x64", "libonnxruntime.so.1"),
                 "kvspec-adapter-kit"):
        if not os.path.exists(os.path.join(HERE, "node_modules", need)):
            return "engines/transformers.js/node_modules is not installed (no %s)" % need
    probe = subprocess.run([sys.executable, "-c", "import kvspec\n"
                            "assert kvspec.HAVE_CORE, 'kvspec._core is not importable'\n"],
                           env=env, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if probe.returncode != 0:
        return (probe.stdout.strip().splitlines()[-1:] or ["(no output)"])[0]
    return None


def random_mode(repo: str, export: str, n: int, seed: int, out: str, env: Dict[str, str]) -> int:
    cmd = [sys.executable, "-m", "kvspec.conform"] + adapter_args(export) + [
        "--random", str(n), "--seed", str(seed), "--keep-going", "--out", out, "--progress", "0"]
    t = time.time()
    p = subprocess.run(cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(p.stdout, end="")
    print("engine: random mode, export=%s, %d programs, seed %d: %.0f s (exit %d)" % (
        export, n, seed, time.time() - t, p.returncode))
    return p.returncode


def check_reported(repo: str, export: str, out: str, rc: int, env: Dict[str, str]) -> int:
    """The random run reported (exit 0 or 1 with its summary line), and each
    shrunk failure it wrote fails again on its own through the engine."""
    if rc not in (0, 1):
        print("engine: the random mode ended with exit %d, not a report" % rc)
        return 1
    traces = sorted(glob.glob(os.path.join(out, "*.trace")))
    if rc == 1 and not traces:
        print("engine: the random mode failed but wrote no shrunk trace to %s" % out)
        return 1
    for trace in traces:
        p = subprocess.run([sys.executable, "-m", "kvspec.conform"] + adapter_args(export) + [trace],
                           cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 1:
            print("engine: %s: expected it to fail on its own (exit 1), got exit %d:\n%s" % (
                trace, p.returncode, p.stdout))
            return 1
        print("engine: %s fails on its own: %s" % (
            os.path.basename(trace), (p.stdout.strip().splitlines() or [""])[0]))
    print("1 passed, 0 failed")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--export", choices=EXPORTS, default="plain")
    ap.add_argument("--check")
    ap.add_argument("--write")
    ap.add_argument("--messages", action="store_true", help="print the runner's lines")
    ap.add_argument("--random", type=int, help="run the random mode instead of the corpus")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out")
    ap.add_argument("--expect-random", choices=("reported",),
                    help="with --random: the run ends with its summary line, and every shrunk "
                         "failure it wrote fails again when run alone on the engine")
    args = ap.parse_args()
    repo = os.path.abspath(args.repo)
    env = dict(os.environ)
    missing = check_engine(repo, env)
    if missing:
        print("engine: FAILED: transformers.js cannot be used: %s" % missing)
        print("engine: install it with tools/setup (npm ci in engines/transformers.js)")
        return 1
    if args.random is not None:
        out = args.out or os.path.join(repo, "out", "transformers-js-random-%s-%d" % (args.export, args.seed))
        shutil.rmtree(out, ignore_errors=True)  # only this run's traces are checked
        rc = random_mode(repo, args.export, args.random, args.seed, out, env)
        return check_reported(repo, args.export, out, rc, env) if args.expect_random else rc
    files = corpus(repo)
    messages: Dict[str, str] = {}
    t = time.time()
    got = run_corpus(repo, files, adapter_args(args.export), env, messages)
    took = time.time() - t
    lines = [got[f] for f in files]
    if args.messages:
        for f in files:
            print(messages[f])
    if args.write:
        with open(args.write, "w") as fh:
            fh.write("# kvspec corpus verdicts for transformers.js "
                     "(engines/transformers.js/transformers_js_verdicts.py)\n")
            fh.write("# settings: export=%s\n" % args.export)
            fh.write("\n".join(lines) + "\n")
        print("wrote %d verdicts to %s (%.0f s)" % (len(lines), args.write, took))
        return 0
    if not args.check:
        ap.error("one of --check, --write, --random is needed")
    with open(args.check) as fh:
        want = [l.strip() for l in fh if l.strip() and not l.startswith("#")]
    counts: Dict[str, int] = {}
    for l in lines:
        k = "not applicable" if l.startswith("not applicable") else l.split(" ")[0]
        counts[k] = counts.get(k, 0) + 1
    if want == lines:
        print("engine: %d traces, verdicts as in %s (export=%s, %.0f s): %s" % (
            len(lines), os.path.basename(args.check), args.export, took,
            ", ".join("%d %s" % (n, k) for k, n in sorted(counts.items()))))
        print("%d passed, 0 failed" % len(lines))
        return 0
    ws, gs = set(want), set(lines)
    print("engine: verdicts differ from %s (export=%s)" % (args.check, args.export))
    for l in sorted(ws - gs):
        print("  expected: %s" % l)
    for l in sorted(gs - ws):
        f = l.split(" ")[-1].split(":")[0]
        print("  got:      %s" % messages.get(f, l))
    print("regenerate with: %s --repo %s --export %s --write %s" % (
        sys.argv[0], args.repo, args.export, args.check))
    print("%d passed, %d failed" % (len(ws & gs), len(gs - ws)))
    return 1


if __name__ == "__main__":
    sys.exit(main())
