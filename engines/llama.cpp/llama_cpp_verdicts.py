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
import glob
import os
import subprocess
import sys

from kvspec.conform import verdict_of_line

ADAPTER = "llama_cpp"  # kvspec.adapters.llama_cpp


def corpus(repo):
    files = sorted(glob.glob(os.path.join(repo, "corpus", "traces", "*.trace")))
    files += sorted(glob.glob(os.path.join(repo, "corpus", "traces", "conformance", "*.trace")))
    # the minimal traces of the llama.cpp bugs found (docs/engines/llama.cpp.md)
    files += sorted(glob.glob(os.path.join(repo, "docs", "engines", "llama.cpp-*.trace")))
    # the shrunk failures of the random mode (same document)
    files += sorted(glob.glob(os.path.join(repo, "docs", "engines", "llama.cpp-random", "*.trace")))
    return [os.path.relpath(f, repo) for f in files]




def run(repo, files, env, messages, lenient=False, settings=()):
    """Verdicts (file -> text) for files, restarting after a crash."""
    out = {}
    todo = list(files)
    flags = ["--lenient-refusals"] if lenient else []
    for s in settings:
        flags += ["--setting", s]
    while todo:
        p = subprocess.run([sys.executable, "-m", "kvspec.conform", "--adapter", ADAPTER] + flags +
                           todo,
                           cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        for line in p.stdout.splitlines():
            v = verdict_of_line(line)
            if v and v[0] in todo:
                out[v[0]] = v[1]
                messages[v[0]] = line
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
    ap.add_argument("--check")
    ap.add_argument("--write")
    ap.add_argument("--messages", action="store_true", help="print the runner's lines")
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
        print("engine: FAILED: llama.cpp cannot be used: %s" % last[0])
        print("engine: install it with tools/setup (npm ci in engines/llama.cpp)")
        return 1
    files = corpus(args.repo)
    messages = {}
    got = run(args.repo, files, env, messages, args.lenient, args.setting)
    lines = [got[f] for f in files]
    if args.messages:
        for f in files:
            print(messages[f])
    if args.write:
        with open(args.write, "w") as fh:
            fh.write("# kvspec corpus verdicts for llama.cpp (engines/llama.cpp/llama_cpp_verdicts.py)\n")
            fh.write("# settings: %s%s\n" % (args.settings or "defaults",
                                             " (lenient refusals)" if args.lenient else ""))
            fh.write("\n".join(lines) + "\n")
        print("wrote %d verdicts to %s" % (len(lines), args.write))
        return 0
    with open(args.check) as fh:
        want = [l.strip() for l in fh if l.strip() and not l.startswith("#")]
    counts = {}
    for l in lines:
        k = "not applicable" if l.startswith("not applicable") else l.split(" ")[0]
        counts[k] = counts.get(k, 0) + 1
    if want == lines:
        print("engine: %d traces, verdicts as in %s (settings: %s): %s" % (
            len(lines), os.path.basename(args.check), args.settings or "defaults",
            ", ".join("%d %s" % (n, k) for k, n in sorted(counts.items()))))
        print("%d passed, 0 failed" % len(lines))
        return 0
    ws, gs = set(want), set(lines)
    print("engine: verdicts differ from %s (settings: %s)" % (args.check, args.settings or "defaults"))
    for l in sorted(ws - gs):
        print("  expected: %s" % l)
    for l in sorted(gs - ws):
        f = l.split(" ")[-1].split(":")[0]
        print("  got:      %s" % messages.get(f, l))
    print("regenerate with: %s --write %s" % (" ".join(sys.argv[:3] + [
        "--setting " + x for x in args.setting] + (["--lenient"] if args.lenient else [])),
        args.check))
    print("%d passed, %d failed" % (len(ws & gs), len(gs - ws)))
    return 1


if __name__ == "__main__":
    sys.exit(main())
