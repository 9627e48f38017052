#!/usr/bin/env python3
"""Runs kvspec's corpus against llama.cpp and compares the verdicts with a
checked-in file, so that a change on either side (the corpus, kvspec's core,
the adapter, the pinned llama.cpp) shows.

    llama_cpp_verdicts.py --repo DIR [--setting KEY=VALUE]... --check FILE   # the ctest (label engine)
    llama_cpp_verdicts.py --repo DIR [--setting KEY=VALUE]... --write FILE   # regenerate FILE

Needs kvspec's compiled module on PYTHONPATH (the runner compares with
kvspec's core). Each trace's verdict is `pass FILE`, `fail FILE:LINE` or
`not applicable FILE` (messages are not compared; the docs quote them). The
runner runs in a child process: if llama.cpp aborts on a trace (a
GGML_ASSERT), that trace's verdict is `crash FILE` and the rest go on in a
new process. Fails with a message, never skips, when llama.cpp (the npm
package, installed by tools/setup) is missing.
"""

import argparse
import os
import subprocess
import sys
from typing import Dict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from engine_verdicts import (add_verdict_options, check_verdicts, corpus,  # noqa: E402
                             engine_missing, take_verdicts, verdict_lines, write_verdicts)

ADAPTER = "llama_cpp"  # kvspec.adapters.llama_cpp
EXTRA_TRACES = (
    # the minimal traces of the llama.cpp bugs found (docs/engines/llama.cpp.md)
    os.path.join("docs", "engines", "llama.cpp-*.trace"),
    # the shrunk failures of the random mode (same document)
    os.path.join("docs", "engines", "llama.cpp-random", "*.trace"),
)


def run(repo, files, env, messages, lenient=False, settings=()):
    """Verdicts (file -> text) for files, restarting after a crash."""
    out: Dict[str, str] = {}
    todo = list(files)
    flags = ["--lenient-refusals"] if lenient else []
    for s in settings:
        flags += ["--setting", s]
    while todo:
        p = subprocess.run([sys.executable, "-m", "kvspec.conform", "--adapter", ADAPTER] + flags +
                           todo,
                           cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        take_verdicts(p.stdout, todo, out, messages)
        rest = [f for f in todo if f not in out]
        if p.returncode in (0, 1) and not rest:
            break
        if p.returncode in (0, 1):
            raise SystemExit("engine: the runner gave no verdict for %s\n%s" % (rest, p.stderr))
        if not rest:
            raise SystemExit("engine: the runner exited with %d\n%s" % (p.returncode, p.stderr))
        crashed = rest[0]
        tail = [l for l in p.stderr.splitlines() if "GGML_ASSERT" in l or "error" in l.lower()]
        out[crashed] = "crash " + crashed
        messages[crashed] = "crash %s: exit status %d: %s" % (crashed, p.returncode,
                                                              " | ".join(tail[:3]))
        todo = rest[1:]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                    help="a llama.cpp setting (the runner's --setting), repeatable")
    add_verdict_options(ap, random=False)
    ap.add_argument("--lenient", action="store_true",
                    help="the runner's --lenient-refusals: missing refusals are undone and "
                    "counted, the trace goes on")
    args = ap.parse_args()
    args.settings = ",".join(args.setting)  # as the verdict files name them
    env = dict(os.environ)
    env.setdefault("KVSPEC_LLAMA_CPP_DIR", os.path.join(os.path.abspath(args.repo), "engines",
                                                        "llama.cpp"))
    # llama.cpp must be there: a missing engine fails, it is never skipped.
    probe = subprocess.run([sys.executable, "-c", "import kvspec, sys\n"
                            "from kvspec.adapters import llama_cpp\n"
                            "assert kvspec.HAVE_CORE, 'kvspec._core is not importable'\n"
                            "llama_cpp.Engine.get()\n"], env=env, cwd=args.repo,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if probe.returncode != 0:
        last = probe.stdout.strip().splitlines()[-1:] or ["(no output)"]
        return engine_missing("llama.cpp", "engines/llama.cpp", last[0])
    files = corpus(args.repo, *EXTRA_TRACES)
    messages: Dict[str, str] = {}
    got = run(args.repo, files, env, messages, args.lenient, args.setting)
    lines = verdict_lines(files, got, messages, args.messages)
    settings = args.settings or "defaults"
    if args.write:
        return write_verdicts(args.write, lines, "kvspec corpus verdicts for llama.cpp "
                              "(engines/llama.cpp/llama_cpp_verdicts.py)",
                              settings + (" (lenient refusals)" if args.lenient else ""), None)
    return check_verdicts(args.check, lines, messages, "settings: " + settings, None,
                          " ".join(sys.argv[:3] + ["--setting " + x for x in args.setting] +
                                   (["--lenient"] if args.lenient else [])))


if __name__ == "__main__":
    sys.exit(main())
