#!/usr/bin/env python3
"""Reads Google Benchmark JSON files written by bench/run.

  report.py summary RUN.json...        the limit fractions and peer ratios
  report.py chart OUT.png RUN.json...  PNG bar chart of limit fraction per
                                       kernel and target (gnuplot)
  report.py compare OLD.json NEW.json  per benchmark: median time of each
                                       run, NEW/OLD, and fraction counters
  report.py table [--cpu NAME] [--exclude REGEX] RUN.json...
                                       the table of goals of docs/benchmarks.md
                                       (markdown): each figure with its
                                       limit or peer
                                       from the same run, on the best target;
                                       --exclude leaves out the benchmarks
                                       whose name the regex finds

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
# of kvspec only: hot runs, the peers (Blas, Ggml) and the walks give
# GB/s or GFLOP/s, next to the L1 and L2 read probes.
FRACTIONS = ("fma_fraction", "read_fraction", "rw_fraction", "inplace_fraction")
LIMITS = ("BM_Stream", "BM_PeakFma", "BM_ReadProbe")
# Highway's x86 targets, best first, as dynamic dispatch prefers them.
DISPATCH_ORDER = ("AVX3_SPR", "AVX3_ZEN4", "AVX3_DL", "AVX3", "AVX2", "SSE4", "SSSE3", "SSE2",
                  "EMU128", "SCALAR")


class InputError(Exception):
    """A file that is not benchmark JSON (main names it and exits 2)."""


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise InputError("cannot read %s as benchmark JSON: %s" % (path, e))


def load(paths):
    """name -> benchmark entry (medians when present, else plain runs)."""
    medians, plain = {}, {}
    for path in paths:
        data = read_json(path)
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
    # (BM_StreamRead, BM_ReadProbe[NonTemporal] over 1 GiB), or the shape's
    # own walk.
    probes = [(b["bytes_per_second"], name) for name, b in runs.items()
              if name == "BM_StreamRead" or re.match(r"BM_ReadProbe(NonTemporal)?/[^/]+/\d+/1048576$", name)]
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
            for kind, label in (("Walk", "walk"), ("FmaWalk", "loads+FMAs walk"),
                                ("FmaWalk4", "loads+FMAs, values in four streams too")):
                walk = runs.get("BM_Decode%s/%s/%s/%s" % (kind, dtype, dim, length))
                if walk and run:
                    ratios.append(("%s time / kvspec time, %s %s, dim %s, %s tokens"
                                   % (label, target, dtype, dim, length),
                                   seconds(walk) / seconds(run)))
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


def load_averages(paths):
    out = []
    for path in paths:
        la = read_json(path).get("context", {}).get("load_avg")
        if la:
            out.append("%s: %s" % (os.path.basename(path), " ".join("%.1f" % x for x in la)))
    return out


def table(paths, cpu, exclude=None):
    """Markdown rows: what, figure, limit or peer, ratio, goal, met. Each
    file (one suite's process) is read on its own: its figures go with the
    limits and peers of that process only. `exclude`: a regex; benchmarks
    whose name it finds are left out (with the rows that read them)."""
    rows = []
    targets = []
    for path in paths:
        runs = load([path])
        if exclude:
            runs = {n: b for n, b in runs.items() if not re.search(exclude, n)}
        # A suite with no goals (ring: no BM_PeakFma) adds no rows.
        if len(paths) > 1 and not any(n.startswith("BM_PeakFma/") for n in runs):
            continue
        targets.append(table_rows(runs, path, rows))
    if not targets:
        sys.exit("report.py table: no BM_PeakFma in %s" % ", ".join(paths))
    print("On %s, best Highway target %s, one thread pinned; medians of the run's repetitions; "
          "load average at the start %s." % (cpu or "(CPU not given)", ", ".join(sorted(set(targets))),
                                             "; ".join(load_averages(paths)) or "unknown"))
    print()
    print("| what | figure | limit or peer (same process) | ratio | goal | |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(r)


def table_rows(runs, path, rows):
    """Appends the table rows of one suite's run; returns its best target."""
    fmas = {n.split("/")[1]: b.get("flops", 0) for n, b in runs.items()
            if n.startswith("BM_PeakFma/")}
    if not fmas:
        sys.exit("report.py table: no BM_PeakFma in %s" % path)
    # The target dispatch picks: the first of Highway's x86 order that ran
    # (on Zen 4, AVX2's peak FMA ties AVX3's), else the fastest peak FMA.
    order = [t for t in DISPATCH_ORDER if t in fmas]
    target = order[0] if order else max(fmas, key=fmas.get)
    gb = lambda b: b["bytes_per_second"] / 1e9
    suite = os.path.basename(path).split(".")[0]

    def row(what, figure, against, ratio, goal, met):
        rows.append("| %s: %s | %s | %s | %s | %s | %s |" % (
            suite, what, figure, against, "" if ratio is None else "%.2f" % ratio, goal,
            "" if met is None else ("met" if met else "**not met**")))

    probes = [(b["bytes_per_second"], n) for n, b in runs.items()
              if n == "BM_StreamRead" or re.match(r"BM_ReadProbe(NonTemporal)?/[^/]+/\d+/1048576$", n)]
    best_probe = max(probes) if probes else (0, "")
    if probes:
        row("read limit: best DRAM read probe", "%.2f GB/s" % (best_probe[0] / 1e9),
            best_probe[1].replace("BM_", ""), None, "", None)
    for kib, level in (("32", "L1"), ("256", "L2")):
        b = runs.get("BM_ReadProbe/%s/4/%s" % (target, kib))
        if b:
            row("%s read (4 streams, %s KiB, hot)" % (level, kib), "%.1f GB/s" % gb(b), "", None,
                "", None)
    row("peak FMA, %s" % target, "%.1f GFLOP/s" % (fmas[target] / 1e9), "", None, "", None)
    rw = runs.get("BM_StreamReadWriteInPlace")
    if rw:
        row("in-place read+write limit", "%.2f GB/s" % gb(rw), "", None, "", None)
    for dim in (64, 128, 256):
        for length in (16384, 32768):
            b = runs.get("BM_Decode/%s/f32/%d/%d" % (target, dim, length))
            if not b:
                continue
            walk = runs.get("BM_DecodeWalk/f32/%d/%d" % (dim, length))
            # The decode's loads and multiply-adds alone, in its order (the
            # keys in four segments where Attend reads them so) and with its
            # requests, without the rest of its work.
            fma = runs.get("BM_DecodeFmaWalk/f32/%d/%d" % (dim, length))
            # The same work with the values in four segments side by side
            # too, an order Attend does not take (it sums the values in
            # slot order).
            fma4 = runs.get("BM_DecodeFmaWalk4/f32/%d/%d" % (dim, length))
            limit, name = best_probe[0], best_probe[1].replace("BM_", "")
            if walk and walk["bytes_per_second"] > limit:
                limit, name = walk["bytes_per_second"], "DecodeWalk"
            if limit:
                f = b["bytes_per_second"] / limit
                row("decode f32 cold, dim %d, %d tokens" % (dim, length), "%.2f GB/s" % gb(b),
                    "read limit %.2f GB/s (%s)" % (limit / 1e9, name), f, ">= 0.85", f >= 0.85)
                if fma and f < 0.85:
                    row("bound of the above: the decode's loads and multiply-adds alone, in its "
                        "order (DecodeFmaWalk, the keys in four segments where the decode reads "
                        "them so, no lane sums, softmax or gather), dim %d, %d tokens"
                        % (dim, length), "%.2f GB/s" % gb(fma),
                        "read limit %.2f GB/s (%s)" % (limit / 1e9, name),
                        fma["bytes_per_second"] / limit, "", None)
                if fma4 and f < 0.85:
                    row("the same loads and multiply-adds with the values in four streams too "
                        "(DecodeFmaWalk4: each head's keys and values in four segments side by "
                        "side; the decode sums its values in slot order), dim %d, %d tokens"
                        % (dim, length),
                        "%.2f GB/s" % gb(fma4), "read limit %.2f GB/s (%s)" % (limit / 1e9, name),
                        fma4["bytes_per_second"] / limit, "", None)
            bf16 = runs.get("BM_Decode/%s/bf16/%d/%d" % (target, dim, length))
            if bf16:
                r = seconds(b) / seconds(bf16)
                row("bf16 vs f32 decode, dim %d, %d tokens" % (dim, length),
                    "%.3f ms" % (seconds(bf16) * 1e3), "f32 %.3f ms" % (seconds(b) * 1e3), r,
                    ">= 1.7x", r >= 1.7)
            blas = runs.get("BM_DecodeBlas/f32/%d/%d" % (dim, length))
            if blas:
                r = seconds(blas) / seconds(b)
                row("kvspec f32 vs OpenBLAS sgemm peer, dim %d, %d tokens" % (dim, length),
                    "%.3f ms" % (seconds(b) * 1e3), "BLAS %.3f ms" % (seconds(blas) * 1e3), r,
                    "", None)
            for kv, ours in (("f32", b), ("f16", bf16)):
                g = runs.get("BM_DecodeGgml/%s/%d/%d" % (kv, dim, length))
                if g and ours:
                    r = seconds(g) / seconds(ours)
                    row("kvspec %s vs ggml %s decode, dim %d, %d tokens"
                        % ("f32" if kv == "f32" else "bf16", kv, dim, length),
                        "%.3f ms" % (seconds(ours) * 1e3), "ggml %.3f ms" % (seconds(g) * 1e3),
                        r, ">= 3x", r >= 3)
                    # What the decode could reach with its own read order and
                    # no arithmetic at all: ggml's time over BM_DecodeWalk's.
                    if kv == "f32" and walk and r < 3:
                        row("bound of the above: the decode's read order alone (DecodeWalk, no "
                            "arithmetic) vs ggml f32, dim %d, %d tokens" % (dim, length),
                            "%.3f ms" % (seconds(walk) * 1e3), "ggml %.3f ms" % (seconds(g) * 1e3),
                            seconds(g) / seconds(walk), "", None)
                    # And with its multiply-adds.
                    if kv == "f32" and fma and r < 3:
                        row("bound of the above: the decode's loads and multiply-adds alone "
                            "(DecodeFmaWalk) vs ggml f32, dim %d, %d tokens" % (dim, length),
                            "%.3f ms" % (seconds(fma) * 1e3), "ggml %.3f ms" % (seconds(g) * 1e3),
                            seconds(g) / seconds(fma), "", None)
            # Quantized storage (q8_0, q4_0): against bf16, each other and ggml.
            q8 = runs.get("BM_Decode/%s/q8_0/%d/%d" % (target, dim, length))
            q4 = runs.get("BM_Decode/%s/q4_0/%d/%d" % (target, dim, length))
            if q8 and bf16 and dim in (64, 128):
                r = seconds(bf16) / seconds(q8)
                row("q8_0 vs bf16 decode, dim %d, %d tokens" % (dim, length),
                    "%.3f ms" % (seconds(q8) * 1e3), "bf16 %.3f ms" % (seconds(bf16) * 1e3), r,
                    ">= 1.7x", r >= 1.7)
            if q8 and q4:
                r = seconds(q8) / seconds(q4)
                row("q4_0 vs q8_0 decode, dim %d, %d tokens" % (dim, length),
                    "%.3f ms" % (seconds(q4) * 1e3), "q8_0 %.3f ms" % (seconds(q8) * 1e3), r,
                    ">= 1.5x", r >= 1.5)
            for kv, ours in (("q8_0", q8), ("q4_0", q4)):
                g = runs.get("BM_DecodeGgml/%s/%d/%d" % (kv, dim, length))
                if g and ours:
                    r = seconds(g) / seconds(ours)
                    goal = kv == "q8_0"
                    row("kvspec %s vs ggml %s decode, dim %d, %d tokens" % (kv, kv, dim, length),
                        "%.3f ms" % (seconds(ours) * 1e3), "ggml %.3f ms" % (seconds(g) * 1e3),
                        r, ">= 3x" if goal else "", (r >= 3) if goal else None)
    # The quantizer, one token written, against ggml's CPU quantizer: within
    # 2x (ggml's time over ours at least 0.5).
    for dim in (64, 128, 256):
        for kv in ("q8_0", "q4_0"):
            ours = runs.get("BM_Quantize/%s/%s/%d" % (target, kv, dim))
            g = runs.get("BM_QuantizeGgml/%s/%d" % (kv, dim))
            if ours and g:
                r = seconds(g) / seconds(ours)
                goal = kv == "q8_0"
                row("quantizer %s, one token (8 KV heads), dim %d" % (kv, dim),
                    "%.0f ns" % (seconds(ours) * 1e9), "ggml %.0f ns" % (seconds(g) * 1e9), r,
                    ">= 0.5" if goal else "", (r >= 0.5) if goal else None)
    for columns in (64, 128, 512):
        b = runs.get("BM_Window/%s/1024/%d" % (target, columns))
        if b and "fma_fraction" in b:
            f = b["fma_fraction"]
            row("window attention, L = %d after 1024" % columns, "%.1f GFLOP/s" % (b["flops"] / 1e9),
                "peak FMA %s" % target, f, ">= 0.6", f >= 0.6)
            for kv in ("f32", "f16"):
                g = runs.get("BM_WindowGgml/%s/1024/%d" % (kv, columns))
                if g:
                    r = seconds(g) / seconds(b)
                    row("kvspec f32 vs ggml %s window, L = %d" % (kv, columns),
                        "%.3f ms" % (seconds(b) * 1e3), "ggml %.3f ms" % (seconds(g) * 1e3), r,
                        "", None)
    hot = runs.get("BM_DecodeHot/%s/16/1" % target)
    if hot and "fma_fraction" in hot:
        f = hot["fma_fraction"]
        row("gated delta step, hot, 16 heads x 128^2", "%.1f us" % (seconds(hot) * 1e6),
            "peak FMA %s" % target, f, ">= 0.5", f >= 0.5)
        # The step's two passes over a state that stays in cache: a read (pass
        # 1) and an in-place read+write (pass 2), probed on a buffer of the
        # hot run's own state size in the same process.
        kib = int(round(hot.get("state_MiB", 0) * 1024))
        read = runs.get("BM_StreamReadHot/%d" % kib)
        rw = runs.get("BM_StreamReadWriteInPlaceHot/%d" % kib)
        if read and rw:
            bound = seconds(read) + seconds(rw)
            row("gated delta step, hot, against two passes over its %d KiB state in cache" % kib,
                "%.1f us" % (seconds(hot) * 1e6),
                "read %.1f us + in-place read+write %.1f us = %.1f us" % (
                    seconds(read) * 1e6, seconds(rw) * 1e6, bound * 1e6),
                bound / seconds(hot), "", None)
    cold = runs.get("BM_Decode/%s/16/1" % target)
    if cold and "inplace_fraction" in cold:
        f = cold["inplace_fraction"]
        row("gated delta step, cold, 16 heads", "%.1f us (%.1f GB/s)" % (seconds(cold) * 1e6, gb(cold)),
            "in-place read+write limit", f, ">= 1/1.15 = 0.87", f >= 1 / 1.15)
    for kind, b in (("hot", hot), ("cold", cold)):
        g = runs.get("BM_Decode%sGgml/16/1" % ("Hot" if kind == "hot" else ""))
        if g and b:
            r = seconds(g) / seconds(b)
            row("kvspec step vs ggml GATED_DELTA_NET, %s, 16 heads" % kind,
                "%.1f us" % (seconds(b) * 1e6), "ggml %.1f us" % (seconds(g) * 1e6), r, ">= 3x",
                r >= 3)
    conv = runs.get("BM_ConvStep/%s/8192/4" % target)
    if conv:
        us = seconds(conv) * 1e6
        g = runs.get("BM_ConvStepGgml/8192/4")
        row("conv1d decode step, 8192 channels, K = 4", "%.2f us" % us,
            "ggml SSM_CONV+SILU %.2f us" % (seconds(g) * 1e6) if g else "",
            seconds(g) / seconds(conv) if g else None, "<= 3 us", us <= 3)
        # What the step's own loads, stores and multiply-adds cost with no
        # SiLU (bench::ConvTraffic, same buffers, same process).
        walk = runs.get("BM_ConvWalk/%s/8192/4" % target)
        if walk and us > 3:
            row("bound of the above: the step's loads, stores and multiply-adds alone "
                "(ConvWalk, no SiLU)", "%.2f us" % (seconds(walk) * 1e6), "", None, "", None)
    return target


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
    if len(argv) < 2 or any(a in ("-h", "--help") for a in argv[1:]):
        print(__doc__.strip())
        return 0
    command = argv[1]
    try:
        return run(command, argv)
    except InputError as e:
        print("report.py %s: %s" % (command, e), file=sys.stderr)
        return 2


def run(command, argv):
    if command == "summary" and len(argv) >= 3:
        summary(argv[2:])
    elif command == "chart" and len(argv) >= 4:
        chart(argv[2], argv[3:])
    elif command == "table" and len(argv) >= 3:
        args = argv[2:]
        options = {"--cpu": None, "--exclude": None}
        while args and args[0] in options:
            if len(args) < 3:
                print("report.py table: %s needs a value and then RUN.json files" % args[0],
                      file=sys.stderr)
                return 2
            options[args[0]], args = args[1], args[2:]
        if options["--exclude"] is not None:
            try:
                re.compile(options["--exclude"])
            except re.error as e:
                print("report.py table: --exclude %r: %s" % (options["--exclude"], e),
                      file=sys.stderr)
                return 2
        table(args, options["--cpu"], options["--exclude"])
    elif command == "compare" and len(argv) == 4:
        compare(argv[2], argv[3])
    else:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
