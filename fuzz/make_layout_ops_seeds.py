#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_layout_ops.

seed_00.bin .. seed_19.bin: 20 pseudo-random byte files. The target decodes
any bytes into a trace (byte 0 picks the Highway target, a
FuzzedDataProvider the rest), so seeds only need varied lengths and
contents; a fixed random seed keeps them stable.

ssm_00.bin .. (up to ssm_07.bin; only with --ssm-from BINARY): pseudo-random
candidates (another fixed seed) whose generated trace holds an `ssm` layer,
picked greedily so that together they cover recurrent layouts alone and
mixed with attention layers, rounds with uniform and ragged accepts, the
twin pattern (forks `tN` and `expect equal`), refused trims, join, filter,
extract and reload; then candidates with header shapes not picked yet. BINARY is fuzz_layout_ops or fuzz_layout_ops_replay
(any build: the generator is the same); it prints each candidate's trace
(KVSPEC_FUZZ_PRINT_TRACE=1). The picks depend on the generator, so rerun
this after changing it.

Usage:
    fuzz/make_layout_ops_seeds.py [FOLDER] [--ssm-from BINARY]
    (FOLDER defaults to corpus/fuzz_layout_ops)
"""
import os
import random
import re
import subprocess
import sys
import tempfile


def trace_of(binary, data):
    """The trace the generator writes for `data` (via the binary)."""
    with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
        f.write(data)
        path = f.name
    try:
        env = dict(os.environ, KVSPEC_FUZZ_PRINT_TRACE="1")
        run = subprocess.run([binary, path], env=env, capture_output=True, text=True,
                             timeout=120)
        if run.returncode != 0:
            sys.exit("make_layout_ops_seeds: %s failed on a candidate:\n%s" %
                     (binary, run.stderr[-2000:]))
        # libFuzzer may run the input more than once: the first trace only.
        parts = run.stderr.split("# target ")
        return "# target " + parts[1] if len(parts) > 1 else ""
    finally:
        os.unlink(path)


def features(trace):
    """What a trace with an ssm layer exercises (empty without one)."""
    layers = re.findall(r"^layer \S+ (\S+)", trace, re.M)
    if "ssm" not in layers:
        return set()
    f = {"ssm"}
    f.add("hybrid" if any(k != "ssm" for k in layers) else "ssm-only")
    if re.search(r"^rows [2-9]", trace, re.M):
        f.add("batched")
    for name, pattern in [
            ("round", r"^accept "), ("ragged", r"^accept \d+,"),
            ("twins", r"^fork t\d+"), ("equal", r"^expect equal t"),
            ("trim-refused", r"^expect error trim"), ("join", r"^join "),
            ("filter", r"^filter "), ("extract", r"^extract "), ("reload", r"^reload"),
            ("left", r"left="), ("decode-round", r"^arm\ndecode")]:
        if re.search(pattern, trace, re.M):
            f.add(name)
    return f


def main():
    args = sys.argv[1:]
    binary = None
    if "--ssm-from" in args:
        i = args.index("--ssm-from")
        if i + 1 >= len(args):
            sys.exit("make_layout_ops_seeds: --ssm-from needs a binary")
        binary = args[i + 1]
        del args[i:i + 2]
    folder = args[0] if args else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "corpus", "fuzz_layout_ops")
    os.makedirs(folder, exist_ok=True)

    rng = random.Random(20240601)
    for i in range(20):
        size = rng.choice([24, 48, 96, 160, 256, 400])
        data = bytes([i]) + bytes(rng.randrange(256) for _ in range(size - 1))
        with open(os.path.join(folder, "seed_%02d.bin" % i), "wb") as f:
            f.write(data)

    if binary is None:
        return
    rng = random.Random(20241130)
    covered, shapes, picked = set(), set(), 0
    for _ in range(400):
        if picked == 8:
            break
        size = rng.choice([160, 256, 400, 512])
        data = bytes(rng.randrange(256) for _ in range(size))
        trace = trace_of(binary, data)
        found = features(trace)
        new = found - covered
        # The header's shape: rows and layer kinds in order.
        shape = " ".join(re.findall(r"^(?:rows \d+|layer \S+ \S+)", trace, re.M))
        # Early picks must bring several new features, later ones one; once
        # every feature is covered, a header shape not seen yet.
        if (new and (len(new) >= 2 or picked >= 4 or not covered)) or (
                found and not new and picked >= 3 and shape not in shapes):
            with open(os.path.join(folder, "ssm_%02d.bin" % picked), "wb") as f:
                f.write(data)
            covered |= new
            shapes.add(shape)
            picked += 1
            print("ssm_%02d.bin: %s (%s)" % (picked - 1, " ".join(sorted(found)), shape))
    print("covered: " + " ".join(sorted(covered)))


if __name__ == "__main__":
    main()
