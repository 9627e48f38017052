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
`pass FILE`, `fail FILE:LINE` or `not applicable FILE`; the corpus runner,
the random mode and the shrunk-trace check are engines/engine_verdicts.py's.
Fails with a message, never skips, when the engine is missing.
"""

import argparse
import os
import shutil
import sys
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from engine_verdicts import (add_verdict_options, check_reported, check_verdicts,  # noqa: E402
                             core_missing, corpus_verdicts, engine_missing, random_mode,
                             write_verdicts)

EXPORTS = ("plain", "gqa")
# the minimal traces of docs/engines/transformers.js.md
EXTRA_TRACES = os.path.join("docs", "engines", "transformers.js-*.trace")


def adapter_args(export: str) -> List[str]:
    return ["--adapter", "transformers_js", "--setting", "export=" + export]


def check_engine(repo: str, env: Dict[str, str]) -> Optional[str]:
    for need in (os.path.join("@huggingface", "transformers", "package.json"),
                 os.path.join("onnxruntime-node", "bin", "napi-v6", "linux", "x64", "libonnxruntime.so.1"),
                 "kvspec-adapter-kit"):
        if not os.path.exists(os.path.join(HERE, "node_modules", need)):
            return "engines/transformers.js/node_modules is not installed (no %s)" % need
    return core_missing(repo, env)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--export", choices=EXPORTS, default="plain")
    add_verdict_options(ap, random=True)
    ap.add_argument("--expect-random", choices=("reported",),
                    help="with --random: the run ends with its summary line, and every shrunk "
                         "failure it wrote fails again when run alone on the engine")
    args = ap.parse_args()
    repo = os.path.abspath(args.repo)
    env = dict(os.environ)
    missing = check_engine(repo, env)
    if missing:
        return engine_missing("transformers.js", "engines/transformers.js", missing)
    if args.random is not None:
        out = args.out or os.path.join(repo, "out", "transformers-js-random-%s-%d" % (args.export, args.seed))
        shutil.rmtree(out, ignore_errors=True)  # only this run's traces are checked
        rc = random_mode(repo, adapter_args(args.export), "export=" + args.export, args.random,
                         args.seed, out, env)
        return check_reported(repo, adapter_args(args.export), out, rc, env) if args.expect_random else rc
    lines, messages, took = corpus_verdicts(repo, EXTRA_TRACES, adapter_args(args.export), env,
                                            args.messages)
    if args.write:
        return write_verdicts(args.write, lines, "kvspec corpus verdicts for transformers.js "
                              "(engines/transformers.js/transformers_js_verdicts.py)",
                              "export=" + args.export, took)
    if not args.check:
        ap.error("one of --check, --write, --random is needed")
    return check_verdicts(args.check, lines, messages, "export=" + args.export, took,
                          "%s --repo %s --export %s" % (sys.argv[0], args.repo, args.export))


if __name__ == "__main__":
    sys.exit(main())
