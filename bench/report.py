#!/usr/bin/env python3
"""Reads Google Benchmark JSON files written by bench/run.

  report.py summary RUN.json...        the limit fractions and peer ratios
  report.py chart OUT.png RUN.json...  PNG bar chart of limit fraction per
                                       kernel and target (gnuplot)
  report.py compare OLD.json NEW.json  per benchmark: median time of each
                                       run, NEW/OLD, and fraction counters

Only the median aggregates are read when a run has repetitions, else the
single runs. Standard library only; the chart needs gnuplot (Debian
gnuplot-nox, which bench/run installs).
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

# The first present is the limit a benchmark is held to: a cold window
# attention reports both, and is bound by FMA throughput. Fractions of a
# memory limit (read, rw, inplace) are reported by the suites for cold runs
# of kvspec only: hot runs, the peers (Blas, Ggml) and BM_DecodeWalk give
# GB/s or GFLOP/s, next to the L1 and L2 read probes.
FRACTIONS = ("fma_fraction", "read_fraction", "rw_fraction", "inplace_fraction")
LIMITS = ("BM_Stream", "BM_PeakFma", "BM_ReadProbe")


def load(paths):
    """name -> benchmark entry (medians when present, else plain runs)."""
    medians, plain = {}, {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        for b in data.get("benchmarks", []):
            if b.get("error_occurred"):
                continue
            if b.get("run_type") == "aggregate":
                if b.get("aggregate_name") == "median":
                    medians[b["run_name"]] = b
            else:
                plain.setdefault(b.get("run_name", b["name"]), b)
    return medians if medians else plain


def seconds(b):
    unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
    return b["cpu_time"] * unit


def fraction(b):
    for key in FRACTIONS:
        if key in b:
            return key, b[key]
    return None, None


def summary(paths):
    runs = load(paths)
    print("%-48s %12s %10s  %s" % ("benchmark", "cpu time", "fraction", "of limit"))
    for name, b in runs.items():
        key, value = fraction(b)
        rate = b.get("flops") or b.get("bytes_per_second")
        extra = ""
        if rate:
            extra = "%.2f G%s/s" % (rate / 1e9, "flop" if "flops" in b else "B")
        if key:
            print("%-48s %10.3f ms %10.3f  %s  %s" % (name, seconds(b) * 1e3, value,
                                                   key.replace("_fraction", ""), extra))
        elif name.startswith(LIMITS):
            print("%-48s %10.3f ms %10s  (limit) %s" % (name, seconds(b) * 1e3, "", extra))
        elif extra:
            print("%-48s %10.3f ms %10s  %s" % (name, seconds(b) * 1e3, "", extra))
    # The read limit of cold decodes: the best DRAM read probe of the run
    # (BM_StreamRead, BM_ReadProbe over 1 GiB), or the shape's own walk.
    probes = [(b["bytes_per_second"], name) for name, b in runs.items()
              if name == "BM_StreamRead" or re.match(r"BM_ReadProbe/[^/]+/\d+/1048576$", name)]
    if probes:
        rate, name = max(probes)
        print("read limit: best probe %s %.2f GB/s; a cold decode's limit is the larger of it "
              "and BM_DecodeWalk of its shape" % (name, rate / 1e9))
    # Peer and storage ratios, same run.
    ratios = []
    for name, b in runs.items():
        m = re.match(r"BM_Decode/([^/]+)/f32/(\d+)/(\d+)$", name)
        if not m:
            continue
        target, dim, length = m.groups()
        blas = runs.get("BM_DecodeBlas/f32/%s/%s" % (dim, length))
        if blas:
            ratios.append(("BLAS sgemm time / kvspec time, %s, dim %s, %s tokens"
                           % (target, dim, length), seconds(blas) / seconds(b)))
        for kv in ("f32", "f16"):
            ggml = runs.get("BM_DecodeGgml/%s/%s/%s" % (kv, dim, length))
            ours = b if kv == "f32" else runs.get("BM_Decode/%s/bf16/%s/%s" % (target, dim, length))
            if ggml and ours:
                ratios.append(("ggml %s time / kvspec %s time, %s, dim %s, %s tokens"
                               % (kv, "f32" if kv == "f32" else "bf16", target, dim, length),
                               seconds(ggml) / seconds(ours)))
        bf16 = runs.get("BM_Decode/%s/bf16/%s/%s" % (target, dim, length))
        if bf16:
            ratios.append(("f32 time / bf16 time, %s, dim %s, %s tokens" % (target, dim, length),
                           seconds(b) / seconds(bf16)))
        for dtype, run in (("f32", b), ("bf16", bf16)):
            walk = runs.get("BM_DecodeWalk/%s/%s/%s" % (dtype, dim, length))
            if walk and run:
                ratios.append(("walk time / kvspec time, %s %s, dim %s, %s tokens"
                               % (target, dtype, dim, length), seconds(walk) / seconds(run)))
    # ssm_bench: ggml's GATED_DELTA_NET alone against our whole Forward step,
    # ggml's SSM_CONV + SILU against ConvStep; attention windows.
    for name, b in runs.items():
        m = re.match(r"BM_(Decode|DecodeHot)/([^/]+)/(\d+)/1$", name)
        if m:
            kind, target, heads = m.groups()
            ggml = runs.get("BM_%sGgml/%s/1" % (kind, heads))
            if ggml and "us_per_step" in b:
                ratios.append(("ggml GATED_DELTA_NET time / kvspec step time, %s %s, %s heads"
                               % (kind, target, heads), seconds(ggml) / seconds(b)))
        m = re.match(r"BM_ConvStep/([^/]+)/(\d+)/(\d+)$", name)
        if m:
            ggml = runs.get("BM_ConvStepGgml/%s/%s" % m.groups()[1:])
            if ggml:
                ratios.append(("ggml SSM_CONV+SILU time / ConvStep time, %s, %s channels"
                               % (m.group(1), m.group(2)), seconds(ggml) / seconds(b)))
        m = re.match(r"BM_(Window|WindowHot)/([^/]+)/1024/(\d+)$", name)
        if m:
            kind, target, columns = m.groups()
            for kv in ("f32", "f16"):
                ggml = runs.get("BM_%sGgml/%s/1024/%s" % (kind, kv, columns))
                if ggml:
                    ratios.append(("ggml %s time / kvspec f32 time, %s %s, L %s"
                                   % (kv, kind, target, columns), seconds(ggml) / seconds(b)))
    for label, value in ratios:
        print("%-64s %6.2fx" % (label, value))


def chart(out, paths):
    runs = load(paths)
    rows = []
    for name, b in runs.items():
        key, value = fraction(b)
        if key:
            rows.append((name.replace("BM_", ""), value, key.replace("_fraction", "")))
    if not rows:
        sys.exit("report.py: no benchmark with a limit fraction in %s" % ", ".join(paths))
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data.txt")
        with open(data, "w") as f:
            for i, (name, value, limit) in enumerate(rows):
                f.write('%d "%s (%s)" %.6f\n' % (i, name, limit, value))
        height = max(400, 18 * len(rows) + 120)
        script = "\n".join([
            'set terminal pngcairo size 1100,%d font ",9"' % height,
            'set output "%s"' % out,
            'set title "Fraction of the limit, same run: cold runs of the read limit or read+write; '
            'windows and hot recurrent steps of peak FMA"',
            "set style fill solid 0.8",
            "set boxwidth 0.7",
            "set yrange [-1:%d]" % len(rows),
            "set xrange [0:*]",
            "set grid x",
            "set ytics nomirror",
            "unset key",
            'plot "%s" using (0.5*$3):1:(0.5*$3):(0.35):yticlabels(2) with boxxyerror' % data,
        ])
        try:
            subprocess.run(["gnuplot"], input=script, text=True, check=True)
        except FileNotFoundError:
            sys.exit("report.py: gnuplot not found (Debian package gnuplot-nox)")
    print("chart: %s (%d benchmarks)" % (out, len(rows)))


def compare(old_path, new_path):
    old, new = load([old_path]), load([new_path])
    print("%-48s %12s %12s %8s  %s" % ("benchmark", "old", "new", "new/old", "fractions old -> new"))
    for name in sorted(set(old) & set(new)):
        a, b = old[name], new[name]
        ka, va = fraction(a)
        kb, vb = fraction(b)
        frac = ""
        if ka and kb:
            frac = "%.3f -> %.3f" % (va, vb)
        print("%-48s %10.3f ms %10.3f ms %8.3f  %s" % (name, seconds(a) * 1e3, seconds(b) * 1e3,
                                                     seconds(b) / seconds(a), frac))
    only = sorted(set(old) ^ set(new))
    if only:
        print("in one run only: %s" % ", ".join(only))


def main(argv):
    # Quiet when piped into head: stop at the closed pipe like other tools.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    command = argv[1]
    if command == "summary" and len(argv) >= 3:
        summary(argv[2:])
    elif command == "chart" and len(argv) >= 4:
        chart(argv[2], argv[3:])
    elif command == "compare" and len(argv) == 4:
        compare(argv[2], argv[3])
    else:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
