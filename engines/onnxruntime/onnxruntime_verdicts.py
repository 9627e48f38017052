#!/usr/bin/env python3
"""Runs kvspec's corpus (and the random mode) against ONNX Runtime in one
buffer setting and compares the verdicts with a checked-in file, so that a
change on either side (the corpus, kvspec's core, the adapter, the pinned
onnxruntime-node) shows.

    onnxruntime_verdicts.py --repo DIR --buffer B --check FILE    # the ctest (label engine)
    onnxruntime_verdicts.py --repo DIR --buffer B --write FILE    # regenerate FILE
    onnxruntime_verdicts.py --repo DIR --buffer B --random N [--seed S] [--out DIR]
                                                      # random mode, --keep-going
    onnxruntime_verdicts.py --repo DIR --overnight                # every setting, --random 300
    (--ring-rollback replay: the adapter's ring_rollback=replay setting)

Needs kvspec's compiled module on PYTHONPATH (the runner compares with kvspec's
core) and engines/onnxruntime/node_modules (tools/setup). Each trace's verdict
is `pass FILE`, `fail FILE:LINE` or `not applicable FILE`. Fails with a
message, never skips, when the engine is missing.
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

from kvspec.conform import verdict_of_line

HERE = os.path.dirname(os.path.abspath(__file__))
BUFFERS = ("full", "shared", "ring")


def corpus(repo: str) -> List[str]:
    files = sorted(glob.glob(os.path.join(repo, "corpus", "traces", "*.trace")))
    files += sorted(glob.glob(os.path.join(repo, "corpus", "traces", "conformance", "*.trace")))
    # the shrunk failures of the random mode (docs/engines/onnxruntime.md)
    files += sorted(glob.glob(os.path.join(repo, "docs", "engines", "onnxruntime-*.trace")))
    return [os.path.relpath(f, repo) for f in files]


RING_ROLLBACK = "length"


def adapter_args(buffer: str) -> List[str]:
    """The runner's options for this engine: the bundled process engine."""
    return ["--adapter", "onnxruntime", "--setting", "buffer=" + buffer,
            "--setting", "ring_rollback=" + RING_ROLLBACK]


def settings_name(buffer: str) -> str:
    return "buffer=%s%s" % (buffer, "" if RING_ROLLBACK == "length" else
                            ", ring_rollback=" + RING_ROLLBACK)




def run_corpus(repo: str, files: List[str], args: List[str], env: Dict[str, str],
               messages: Dict[str, str]) -> Dict[str, str]:
    p = subprocess.run([sys.executable, "-m", "kvspec.conform"] + args + files, cwd=repo, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = {}
    for line in p.stdout.splitlines():
        v = verdict_of_line(line)
        if v and v[0] in files:
            out[v[0]] = v[1]
            messages[v[0]] = line
    rest = [f for f in files if f not in out]
    if p.returncode not in (0, 1) or rest:
        raise SystemExit("engine: the runner exited with %d, no verdict for %s\n%s" % (
            p.returncode, rest, p.stderr[-3000:]))
    return out


def check_engine(repo: str, env: Dict[str, str]) -> Optional[str]:
    lib = os.path.join(HERE, "node_modules", "onnxruntime-node", "bin", "napi-v6", "linux", "x64",
                       "libonnxruntime.so.1")
    kit = os.path.join(HERE, "node_modules", "kvspec-adapter-kit")
    if not os.path.exists(lib) or not os.path.exists(kit):
        return "engines/onnxruntime/node_modules is not installed"
    probe = subprocess.run([sys.executable, "-c", "import kvspec\n"
                            "assert kvspec.HAVE_CORE, 'kvspec._core is not importable'\n"],
                           env=env, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if probe.returncode != 0:
        return (probe.stdout.strip().splitlines()[-1:] or ["(no output)"])[0]
    return None


def random_mode(repo: str, buffer: str, n: int, seed: int, out: Optional[str],
                env: Dict[str, str], budget: Optional[float], kinds: Optional[str] = None) -> int:
    args = adapter_args(buffer)
    out = out or os.path.join(repo, "out", "onnxruntime-random-%s%s-%d" % (
        buffer, "" if RING_ROLLBACK == "length" else "-" + RING_ROLLBACK, seed))
    cmd = [sys.executable, "-m", "kvspec.conform"] + args + [
        "--random", str(n), "--seed", str(seed), "--keep-going", "--out", out, "--progress", "0"]
    if budget:
        cmd += ["--time-budget", str(budget)]
    if kinds:
        cmd += ["--kinds", kinds]
    t = time.time()
    p = subprocess.run(cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    print(p.stdout, end="")
    print("engine: random mode, %s, %d programs, seed %d: %.0f s (exit %d)" % (
        settings_name(buffer), n, seed, time.time() - t, p.returncode))
    return p.returncode


def check_reported(repo: str, buffer: str, out: Optional[str], rc: int,
                   env: Dict[str, str]) -> int:
    """A random run reported rather than crashed: exit 0 or 1 with the summary
    line (random_mode printed its output), and each shrunk failure written
    to `out` fails again on its own, so it is a standalone reproducer."""
    if rc not in (0, 1) or not out:
        print("engine: the random mode ended with exit %d, not a report" % rc)
        return 1
    traces = sorted(glob.glob(os.path.join(out, "*.trace")))
    if rc == 1 and not traces:
        print("engine: the random mode failed but wrote no shrunk trace to %s" % out)
        return 1
    for trace in traces:
        p = subprocess.run([sys.executable, "-m", "kvspec.conform"] + adapter_args(buffer) +
                           [trace], cwd=repo, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
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
    ap.add_argument("--buffer", choices=BUFFERS, default="full")
    ap.add_argument("--ring-rollback", choices=("length", "replay"), default="length",
                    help="the adapter's ring_rollback setting")
    ap.add_argument("--check")
    ap.add_argument("--write")
    ap.add_argument("--messages", action="store_true", help="print the runner's lines")
    ap.add_argument("--random", type=int, help="run the random mode instead of the corpus")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out")
    ap.add_argument("--time-budget", type=float)
    ap.add_argument("--kinds", help="with --random: the runner's --kinds")
    ap.add_argument("--expect-random", choices=("pass", "fail", "reported"),
                    help="with --random: the exit status expected (pass: 0, fail: 1), or "
                         "reported: the run ends with its summary line, and every shrunk "
                         "failure it wrote fails again when run alone on the engine")
    ap.add_argument("--overnight", action="store_true",
                    help="every buffer setting: the corpus, then --random 300")
    args = ap.parse_args()
    global RING_ROLLBACK
    RING_ROLLBACK = args.ring_rollback
    repo = os.path.abspath(args.repo)
    env = dict(os.environ)
    missing = check_engine(repo, env)
    if missing:
        print("engine: FAILED: ONNX Runtime cannot be used: %s" % missing)
        print("engine: install it with tools/setup (npm ci in engines/onnxruntime)")
        return 1
    if args.overnight:
        status = 0
        for b, rollback in [(b, "length") for b in BUFFERS] + [("ring", "replay")]:
            name = b if rollback == "length" else b + "_" + rollback
            rc = subprocess.call([sys.executable, __file__, "--repo", repo, "--buffer", b,
                                  "--ring-rollback", rollback, "--check",
                                  os.path.join(HERE, "verdicts", name + ".txt")], env=env)
            status = max(status, rc)
            RING_ROLLBACK = rollback
            random_mode(repo, b, 300, args.seed, None, dict(env), None)
        return status
    if args.random is not None:
        if args.expect_random == "reported" and args.out:
            shutil.rmtree(args.out, ignore_errors=True)  # only this run's traces are checked
        rc = random_mode(repo, args.buffer, args.random, args.seed, args.out, env, args.time_budget,
                         args.kinds)
        if args.expect_random == "reported":
            return check_reported(repo, args.buffer, args.out, rc, env)
        if args.expect_random:
            expected_rc = 0 if args.expect_random == "pass" else 1
            if rc != expected_rc:
                print("engine: expected the random mode to %s (exit %d), got exit %d" % (
                    args.expect_random, expected_rc, rc))
                return 1
            print("1 passed, 0 failed")
            return 0
        return rc
    files = corpus(repo)
    messages: Dict[str, str] = {}
    t = time.time()
    got = run_corpus(repo, files, adapter_args(args.buffer), env, messages)
    took = time.time() - t
    lines = [got[f] for f in files]
    if args.messages:
        for f in files:
            print(messages[f])
    if args.write:
        with open(args.write, "w") as fh:
            fh.write("# kvspec corpus verdicts for ONNX Runtime (engines/onnxruntime/onnxruntime_verdicts.py)\n")
            fh.write("# settings: %s\n" % settings_name(args.buffer))
            fh.write("\n".join(lines) + "\n")
        print("wrote %d verdicts to %s (%.0f s)" % (len(lines), args.write, took))
        return 0
    with open(args.check) as fh:
        want = [l.strip() for l in fh if l.strip() and not l.startswith("#")]
    counts: Dict[str, int] = {}
    for l in lines:
        k = "not applicable" if l.startswith("not applicable") else l.split(" ")[0]
        counts[k] = counts.get(k, 0) + 1
    if want == lines:
        print("engine: %d traces, verdicts as in %s (%s, %.0f s): %s" % (
            len(lines), os.path.basename(args.check), settings_name(args.buffer), took,
            ", ".join("%d %s" % (n, k) for k, n in sorted(counts.items()))))
        print("%d passed, 0 failed" % len(lines))
        return 0
    ws, gs = set(want), set(lines)
    print("engine: verdicts differ from %s (%s)" % (args.check, settings_name(args.buffer)))
    for l in sorted(ws - gs):
        print("  expected: %s" % l)
    for l in sorted(gs - ws):
        f = l.split(" ")[-1].split(":")[0]
        print("  got:      %s" % messages.get(f, l))
    print("regenerate with: %s --repo %s --buffer %s --ring-rollback %s --write %s" % (
        sys.argv[0], args.repo, args.buffer, args.ring_rollback, args.check))
    print("%d passed, %d failed" % (len(ws & gs), len(gs - ws)))
    return 1


if __name__ == "__main__":
    sys.exit(main())
