"""What the engines' verdict scripts (engines/*/*_verdicts.py) share: the
corpus list, the runner over it, the random mode and its shrunk-trace check,
the engine presence check, and writing or checking a verdict file. Each
script passes what differs: its adapter options, its settings text, its file
header and its regenerate command.
"""

import argparse
import glob
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

from kvspec.conform import verdict_of_line


def corpus(repo: str, *extra: str) -> List[str]:
    """The corpus traces, then those of the `extra` globs (relative to repo),
    as paths relative to repo."""
    files = sorted(glob.glob(os.path.join(repo, "corpus", "traces", "*.trace")))
    files += sorted(glob.glob(os.path.join(repo, "corpus", "traces", "conformance", "*.trace")))
    for pattern in extra:
        files += sorted(glob.glob(os.path.join(repo, pattern)))
    return [os.path.relpath(f, repo) for f in files]


def add_verdict_options(ap: argparse.ArgumentParser, random: bool) -> None:
    """--check, --write, --messages and, with random, --random, --seed, --out."""
    ap.add_argument("--check")
    ap.add_argument("--write")
    ap.add_argument("--messages", action="store_true", help="print the runner's lines")
    if random:
        ap.add_argument("--random", type=int, help="run the random mode instead of the corpus")
        ap.add_argument("--seed", type=int, default=1)
        ap.add_argument("--out")


def take_verdicts(stdout: str, files: List[str], out: Dict[str, str],
                  messages: Dict[str, str]) -> None:
    """Adds the verdicts (and the runner's lines) that stdout gives for files."""
    for line in stdout.splitlines():
        v = verdict_of_line(line)
        if v and v[0] in files:
            out[v[0]] = v[1]
            messages[v[0]] = line


def run_corpus(repo: str, files: List[str], args: List[str], env: Dict[str, str],
               messages: Dict[str, str]) -> Dict[str, str]:
    p = subprocess.run([sys.executable, "-m", "kvspec.conform"] + args + files, cwd=repo, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: Dict[str, str] = {}
    take_verdicts(p.stdout, files, out, messages)
    rest = [f for f in files if f not in out]
    if p.returncode not in (0, 1) or rest:
        raise SystemExit("engine: the runner exited with %d, no verdict for %s\n%s" % (
            p.returncode, rest, p.stderr[-3000:]))
    return out


def core_missing(repo: str, env: Dict[str, str]) -> Optional[str]:
    """Why kvspec's compiled module cannot be used, or None."""
    probe = subprocess.run([sys.executable, "-c", "import kvspec\n"
                            "assert kvspec.HAVE_CORE, 'kvspec._core is not importable'\n"],
                           env=env, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if probe.returncode != 0:
        return (probe.stdout.strip().splitlines()[-1:] or ["(no output)"])[0]
    return None


def engine_missing(engine: str, folder: str, why: str) -> int:
    """Says that the engine cannot be used (a failure, never a skip)."""
    print("engine: FAILED: %s cannot be used: %s" % (engine, why))
    print("engine: install it with tools/setup (npm ci in %s)" % folder)
    return 1


def random_mode(repo: str, adapter_args: List[str], settings: str, n: int, seed: int, out: str,
                env: Dict[str, str], budget: Optional[float] = None,
                kinds: Optional[str] = None) -> int:
    """The runner's random mode with --keep-going; prints its output and a
    summary line naming `settings`."""
    cmd = [sys.executable, "-m", "kvspec.conform"] + adapter_args + [
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
        settings, n, seed, time.time() - t, p.returncode))
    return p.returncode


def check_reported(repo: str, adapter_args: List[str], out: Optional[str], rc: int,
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
        p = subprocess.run([sys.executable, "-m", "kvspec.conform"] + adapter_args + [trace],
                           cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        if p.returncode != 1:
            print("engine: %s: expected it to fail on its own (exit 1), got exit %d:\n%s" % (
                trace, p.returncode, p.stdout))
            return 1
        print("engine: %s fails on its own: %s" % (
            os.path.basename(trace), (p.stdout.strip().splitlines() or [""])[0]))
    print("1 passed, 0 failed")
    return 0


def verdict_lines(files: List[str], got: Dict[str, str], messages: Dict[str, str],
                  show_messages: bool) -> List[str]:
    """The verdicts in corpus order; with show_messages, the runner's lines."""
    lines = [got[f] for f in files]
    if show_messages:
        for f in files:
            print(messages[f])
    return lines


def corpus_verdicts(repo: str, extra: str, adapter_args: List[str], env: Dict[str, str],
                    show_messages: bool) -> Tuple[List[str], Dict[str, str], float]:
    """Runs the corpus (and the `extra` glob) through the engine in one runner:
    the verdicts in corpus order, the runner's lines, the seconds it took."""
    files = corpus(repo, extra)
    messages: Dict[str, str] = {}
    t = time.time()
    got = run_corpus(repo, files, adapter_args, env, messages)
    took = time.time() - t
    return verdict_lines(files, got, messages, show_messages), messages, took


def write_verdicts(path: str, lines: List[str], header: str, settings: str,
                   took: Optional[float]) -> int:
    """Writes a verdict file: `# header`, `# settings: settings`, the verdicts."""
    with open(path, "w") as fh:
        fh.write("# %s\n" % header)
        fh.write("# settings: %s\n" % settings)
        fh.write("\n".join(lines) + "\n")
    print("wrote %d verdicts to %s%s" % (len(lines), path,
                                         "" if took is None else " (%.0f s)" % took))
    return 0


def check_verdicts(path: str, lines: List[str], messages: Dict[str, str], settings: str,
                   took: Optional[float], regenerate: str) -> int:
    """Compares the verdicts with the file at path; on a difference prints
    both sides and `regenerate with: <regenerate> --write <path>`."""
    with open(path) as fh:
        want = [l.strip() for l in fh if l.strip() and not l.startswith("#")]
    counts: Dict[str, int] = {}
    for l in lines:
        k = "not applicable" if l.startswith("not applicable") else l.split(" ")[0]
        counts[k] = counts.get(k, 0) + 1
    if want == lines:
        print("engine: %d traces, verdicts as in %s (%s%s): %s" % (
            len(lines), os.path.basename(path), settings,
            "" if took is None else ", %.0f s" % took,
            ", ".join("%d %s" % (n, k) for k, n in sorted(counts.items()))))
        print("%d passed, 0 failed" % len(lines))
        return 0
    ws, gs = set(want), set(lines)
    print("engine: verdicts differ from %s (%s)" % (path, settings))
    for l in sorted(ws - gs):
        print("  expected: %s" % l)
    for l in sorted(gs - ws):
        f = l.split(" ")[-1].split(":")[0]
        print("  got:      %s" % messages.get(f, l))
    print("regenerate with: %s --write %s" % (regenerate, path))
    print("%d passed, %d failed" % (len(ws & gs), len(gs - ws)))
    return 1
