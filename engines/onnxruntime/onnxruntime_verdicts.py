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
import os
import shutil
import subprocess
import sys
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from engine_verdicts import (add_verdict_options, check_reported, check_verdicts,  # noqa: E402
                             core_missing, corpus_verdicts, engine_missing, random_mode,
                             write_verdicts)

BUFFERS = ("full", "shared", "ring")
# the shrunk failures of the random mode (docs/engines/onnxruntime.md)
EXTRA_TRACES = os.path.join("docs", "engines", "onnxruntime-*.trace")

RING_ROLLBACK = "length"


def adapter_args(buffer: str) -> List[str]:
    """The runner's options for this engine: the bundled process engine."""
    return ["--adapter", "onnxruntime", "--setting", "buffer=" + buffer,
            "--setting", "ring_rollback=" + RING_ROLLBACK]


def settings_name(buffer: str) -> str:
    return "buffer=%s%s" % (buffer, "" if RING_ROLLBACK == "length" else
                            ", ring_rollback=" + RING_ROLLBACK)


def check_engine(repo: str, env: Dict[str, str]) -> Optional[str]:
    lib = os.path.join(HERE, "node_modules", "onnxruntime-node", "bin", "napi-v6", "linux", "x64",
                       "libonnxruntime.so.1")
    kit = os.path.join(HERE, "node_modules", "kvspec-adapter-kit")
    if not os.path.exists(lib) or not os.path.exists(kit):
        return "engines/onnxruntime/node_modules is not installed"
    return core_missing(repo, env)


def random_run(repo: str, buffer: str, n: int, seed: int, out: Optional[str],
               env: Dict[str, str], budget: Optional[float], kinds: Optional[str] = None) -> int:
    out = out or os.path.join(repo, "out", "onnxruntime-random-%s%s-%d" % (
        buffer, "" if RING_ROLLBACK == "length" else "-" + RING_ROLLBACK, seed))
    return random_mode(repo, adapter_args(buffer), settings_name(buffer), n, seed, out, env,
                       budget, kinds)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--buffer", choices=BUFFERS, default="full")
    ap.add_argument("--ring-rollback", choices=("length", "replay"), default="length",
                    help="the adapter's ring_rollback setting")
    add_verdict_options(ap, random=True)
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
        return engine_missing("ONNX Runtime", "engines/onnxruntime", missing)
    if args.overnight:
        status = 0
        for b, rollback in [(b, "length") for b in BUFFERS] + [("ring", "replay")]:
            name = b if rollback == "length" else b + "_" + rollback
            rc = subprocess.call([sys.executable, __file__, "--repo", repo, "--buffer", b,
                                  "--ring-rollback", rollback, "--check",
                                  os.path.join(HERE, "verdicts", name + ".txt")], env=env)
            status = max(status, rc)
            RING_ROLLBACK = rollback
            random_run(repo, b, 300, args.seed, None, dict(env), None)
        return status
    if args.random is not None:
        if args.expect_random == "reported" and args.out:
            shutil.rmtree(args.out, ignore_errors=True)  # only this run's traces are checked
        rc = random_run(repo, args.buffer, args.random, args.seed, args.out, env, args.time_budget,
                        args.kinds)
        if args.expect_random == "reported":
            return check_reported(repo, adapter_args(args.buffer), args.out, rc, env)
        if args.expect_random:
            expected_rc = 0 if args.expect_random == "pass" else 1
            if rc != expected_rc:
                print("engine: expected the random mode to %s (exit %d), got exit %d" % (
                    args.expect_random, expected_rc, rc))
                return 1
            print("1 passed, 0 failed")
            return 0
        return rc
    lines, messages, took = corpus_verdicts(repo, EXTRA_TRACES, adapter_args(args.buffer), env,
                                            args.messages)
    if args.write:
        return write_verdicts(args.write, lines, "kvspec corpus verdicts for ONNX Runtime "
                              "(engines/onnxruntime/onnxruntime_verdicts.py)",
                              settings_name(args.buffer), took)
    return check_verdicts(args.check, lines, messages, settings_name(args.buffer), took,
                          "%s --repo %s --buffer %s --ring-rollback %s" % (
                              sys.argv[0], args.repo, args.buffer, args.ring_rollback))


if __name__ == "__main__":
    sys.exit(main())
