#!/usr/bin/env python3
"""Tests of bench/report.py's table (run by ctest): the rows docs/benchmarks.md's
table of goals is made of, from small Google Benchmark JSON files written
here (no benchmark runs).

usage: report_test.py [unittest options]

- A goal's row says met or not met from the figures, with the right ratio.
- The bound rows appear exactly when their goal is not met: the decode's
  walk against ggml (BM_DecodeWalk), the decode's loads and multiply-adds
  against the read limit (BM_DecodeFmaWalk) and conv1d's traffic
  (BM_ConvWalk).
- Fractions of a limit come from the same file only.
- The command line: --help anywhere prints the usage; a file that is not
  benchmark JSON, or a missing argument, exits 2 with a message.
"""
import contextlib
import importlib.machinery
import importlib.util
import io
import json
import os
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
_loader = importlib.machinery.SourceFileLoader("report", os.path.join(HERE, "report.py"))
_spec = importlib.util.spec_from_loader("report", _loader)
report = importlib.util.module_from_spec(_spec)
_loader.exec_module(report)


def median(name, cpu_time, unit="us", **counters):
    entry = {"name": name + "_median", "run_name": name, "run_type": "aggregate",
             "aggregate_name": "median", "cpu_time": cpu_time, "real_time": cpu_time,
             "time_unit": unit}
    entry.update(counters)
    return entry


class Table(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def table(self, suites, exclude=None):
        """report.py table over {suite: [entries]}; its rows by 'what'."""
        paths = []
        for suite, entries in suites.items():
            path = os.path.join(self.dir.name, suite + ".json")
            with open(path, "w") as f:
                json.dump({"context": {"load_avg": [0.5, 0.5, 0.5]}, "benchmarks": entries}, f)
            paths.append(path)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            report.table(paths, "test CPU", exclude)
        rows = {}
        for line in out.getvalue().splitlines():
            if line.startswith("| ") and not line.startswith("| what"):
                cells = [c.strip() for c in line.strip("|").split("|")]
                rows[cells[0]] = cells[1:]
        return rows

    def ssm(self, conv_us, walk_us=None):
        entries = [median("BM_PeakFma/AVX3", 1.0, flops=1.5e11),
                   median("BM_ConvStep/AVX3/8192/4", conv_us)]
        if walk_us is not None:
            entries.append(median("BM_ConvWalk/AVX3/8192/4", walk_us))
        return self.table({"ssm": entries})

    def test_conv_goal_met_has_no_bound_row(self):
        rows = self.ssm(2.5, walk_us=2.0)
        self.assertEqual(rows["ssm: conv1d decode step, 8192 channels, K = 4"][0], "2.50 us")
        self.assertEqual(rows["ssm: conv1d decode step, 8192 channels, K = 4"][-1], "met")
        self.assertFalse([w for w in rows if "ConvWalk" in w])

    def test_conv_goal_not_met_gives_the_walk_as_its_bound(self):
        rows = self.ssm(6.0, walk_us=5.25)
        self.assertEqual(rows["ssm: conv1d decode step, 8192 channels, K = 4"][-1], "**not met**")
        bound = [r for w, r in rows.items() if "ConvWalk" in w]
        self.assertEqual(len(bound), 1)
        self.assertEqual(bound[0][0], "5.25 us")
        self.assertEqual(bound[0][-1], "")  # a bound, not a goal

    def test_conv_without_walk_has_no_bound_row(self):
        rows = self.ssm(6.0)
        self.assertFalse([w for w in rows if "ConvWalk" in w])

    def attention(self, decode_ms, ggml_ms, walk_ms, fma_walk=None, decode_rate=11e9,
                  fma_walk4=None):
        entries = [median("BM_PeakFma/AVX3", 1.0, flops=1.5e11),
                   median("BM_ReadProbe/AVX3/8/1048576", 1.0, bytes_per_second=14e9),
                   median("BM_DecodeWalk/f32/64/16384", walk_ms, unit="ms",
                          bytes_per_second=13e9),
                   median("BM_Decode/AVX3/f32/64/16384", decode_ms, unit="ms",
                          bytes_per_second=decode_rate),
                   median("BM_DecodeGgml/f32/64/16384", ggml_ms, unit="ms")]
        if fma_walk is not None:  # its rate, bytes per second
            entries.append(median("BM_DecodeFmaWalk/f32/64/16384", 1.0, unit="ms",
                                  bytes_per_second=fma_walk))
        if fma_walk4 is not None:
            entries.append(median("BM_DecodeFmaWalk4/f32/64/16384", 1.0, unit="ms",
                                  bytes_per_second=fma_walk4))
        return self.table({"attention": entries})

    def fma_bound(self, rows):
        return [r for w, r in rows.items() if "DecodeFmaWalk," in w or "DecodeFmaWalk)" in w]

    def four_streams(self, rows):
        return [r for w, r in rows.items() if "DecodeFmaWalk4" in w]

    def test_decode_under_its_goal_gives_its_work_from_four_streams(self):
        rows = self.attention(decode_ms=6.0, ggml_ms=30.0, walk_ms=5.0, fma_walk=11.2e9,
                              fma_walk4=13.3e9)
        rows4 = self.four_streams(rows)
        self.assertEqual(len(rows4), 1)
        self.assertEqual(rows4[0][0], "13.30 GB/s")
        self.assertEqual(rows4[0][2], "0.95")
        self.assertEqual(rows4[0][-1], "")  # a bound, not a goal
        self.assertEqual(len(self.fma_bound(rows)), 1)
        rows = self.attention(decode_ms=6.0, ggml_ms=30.0, walk_ms=5.0, fma_walk4=13.3e9,
                              decode_rate=12e9)
        self.assertFalse(self.four_streams(rows))  # the goal met: no bound rows

    def test_quantized_rows(self):
        entries = [median("BM_PeakFma/AVX3", 1.0, flops=1.5e11),
                   median("BM_Decode/AVX3/f32/64/16384", 8.0, unit="ms"),
                   median("BM_Decode/AVX3/bf16/64/16384", 4.0, unit="ms"),
                   median("BM_Decode/AVX3/q8_0/64/16384", 2.0, unit="ms"),
                   median("BM_Decode/AVX3/q4_0/64/16384", 1.6, unit="ms"),
                   median("BM_DecodeGgml/q8_0/64/16384", 7.0, unit="ms"),
                   median("BM_Quantize/AVX3/q8_0/128", 800.0, unit="ns"),
                   median("BM_QuantizeGgml/q8_0/128", 370.0, unit="ns")]
        rows = self.table({"attention": entries})
        self.assertEqual(rows["attention: q8_0 vs bf16 decode, dim 64, 16384 tokens"][2:], ["2.00", ">= 1.7x", "met"])
        self.assertEqual(rows["attention: q4_0 vs q8_0 decode, dim 64, 16384 tokens"][2:], ["1.25", ">= 1.5x", "**not met**"])
        self.assertEqual(rows["attention: kvspec q8_0 vs ggml q8_0 decode, dim 64, 16384 tokens"][2:], ["3.50", ">= 3x", "met"])
        self.assertEqual(rows["attention: quantizer q8_0, one token (8 KV heads), dim 128"][2:], ["0.46", ">= 0.5", "**not met**"])

    def test_excluded_benchmarks_leave_their_rows_out(self):
        entries = [median("BM_PeakFma/AVX3", 1.0, flops=1.5e11),
                   median("BM_Decode/AVX3/f32/64/16384", 8.0, unit="ms"),
                   median("BM_Decode/AVX3/bf16/64/16384", 4.0, unit="ms"),
                   median("BM_Quantize/AVX3/q8_0/128", 800.0, unit="ns"),
                   median("BM_QuantizeGgml/q8_0/128", 370.0, unit="ns")]
        quantizer = "attention: quantizer q8_0, one token (8 KV heads), dim 128"
        bf16 = "attention: bf16 vs f32 decode, dim 64, 16384 tokens"
        self.assertIn(quantizer, self.table({"attention": entries}))
        rows = self.table({"attention": entries}, exclude="^BM_Quantize")
        self.assertNotIn(quantizer, rows)
        self.assertEqual(rows[bf16][2:], ["2.00", ">= 1.7x", "met"])

    def test_decode_under_its_goal_gives_its_loads_and_fmas_as_bound(self):
        rows = self.attention(decode_ms=6.0, ggml_ms=30.0, walk_ms=5.0, fma_walk=12.6e9)
        bound = self.fma_bound(rows)
        self.assertEqual(len(bound), 1)
        self.assertEqual(bound[0][0], "12.60 GB/s")
        self.assertEqual(bound[0][1], "read limit 14.00 GB/s (ReadProbe/AVX3/8/1048576)")
        self.assertEqual(bound[0][2], "0.90")
        self.assertEqual(bound[0][-1], "")  # a bound, not a goal

    def test_a_faster_non_temporal_probe_is_the_read_limit(self):
        entries = [median("BM_PeakFma/AVX3", 1.0, flops=1.5e11),
                   median("BM_ReadProbe/AVX3/8/1048576", 1.0, bytes_per_second=14e9),
                   median("BM_ReadProbeNonTemporal/AVX3/4/1048576", 1.0,
                          bytes_per_second=15e9),
                   median("BM_ReadProbeNonTemporal/AVX3/4/256", 1.0,
                          bytes_per_second=90e9),  # not a DRAM probe
                   median("BM_Decode/AVX3/f32/64/16384", 6.0, unit="ms",
                          bytes_per_second=12e9)]
        rows = self.table({"attention": entries})
        row = rows["attention: decode f32 cold, dim 64, 16384 tokens"]
        self.assertEqual(row[1], "read limit 15.00 GB/s (ReadProbeNonTemporal/AVX3/4/1048576)")
        self.assertEqual(row[2], "0.80")

    def test_decode_at_its_goal_has_no_fma_bound_row(self):
        rows = self.attention(decode_ms=6.0, ggml_ms=30.0, walk_ms=5.0, fma_walk=13e9,
                              decode_rate=12e9)
        self.assertEqual(rows["attention: decode f32 cold, dim 64, 16384 tokens"][-1], "met")
        self.assertFalse(self.fma_bound(rows))

    def test_decode_under_3x_ggml_gives_its_loads_and_fmas_as_bound(self):
        # The FmaWalk's entry takes 1.0 ms: ggml's 2.5 ms over it.
        rows = self.attention(decode_ms=1.25, ggml_ms=2.5, walk_ms=0.8, fma_walk=12e9)
        what = ("attention: bound of the above: the decode's loads and multiply-adds alone "
                "(DecodeFmaWalk) vs ggml f32, dim 64, 16384 tokens")
        self.assertEqual(rows[what][0], "1.000 ms")
        self.assertEqual(rows[what][2], "2.50")
        rows = self.attention(decode_ms=0.8, ggml_ms=2.5, walk_ms=0.7, fma_walk=12e9)
        self.assertNotIn(what, rows)  # 3.1x: met, no bound

    def test_decode_without_fma_walk_has_no_fma_bound_row(self):
        self.assertFalse(self.fma_bound(self.attention(decode_ms=6.0, ggml_ms=30.0, walk_ms=5.0)))

    def test_decode_under_3x_ggml_gives_its_walk_as_bound(self):
        rows = self.attention(decode_ms=6.0, ggml_ms=15.0, walk_ms=5.0)
        what = "attention: kvspec f32 vs ggml f32 decode, dim 64, 16384 tokens"
        self.assertEqual(rows[what][2], "2.50")
        self.assertEqual(rows[what][-1], "**not met**")
        bound = [r for w, r in rows.items() if w.startswith("attention: bound of the above")]
        self.assertEqual(len(bound), 1)
        self.assertEqual(bound[0][2], "3.00")  # 15 / 5

    def test_the_best_target_is_the_one_dispatch_picks(self):
        # AVX2's peak FMA a hair above AVX3's (Zen 4): the rows are AVX3's.
        rows = self.table({"attention": [median("BM_PeakFma/AVX3", 1.0, flops=1.16e11),
                                         median("BM_PeakFma/AVX2", 1.0, flops=1.17e11)]})
        self.assertIn("attention: peak FMA, AVX3", rows)

    def test_a_suite_without_goals_adds_no_rows(self):
        # bench/run's default run has ring.json, which holds no BM_PeakFma.
        rows = self.table({
            "attention": [median("BM_PeakFma/AVX3", 1.0, flops=1.5e11)],
            "ring": [median("BM_RingWrite/1", 1.0)]})
        self.assertIn("attention: peak FMA, AVX3", rows)
        self.assertFalse([w for w in rows if w.startswith("ring")])

    def test_decode_at_3x_ggml_has_no_bound_row(self):
        rows = self.attention(decode_ms=5.0, ggml_ms=15.0, walk_ms=4.0)
        what = "attention: kvspec f32 vs ggml f32 decode, dim 64, 16384 tokens"
        self.assertEqual(rows[what][-1], "met")
        self.assertFalse([w for w in rows if w.startswith("attention: bound of the above")])

    def test_read_fraction_row(self):
        rows = self.attention(decode_ms=6.0, ggml_ms=15.0, walk_ms=5.0)
        what = "attention: decode f32 cold, dim 64, 16384 tokens"
        self.assertEqual(rows[what][0], "11.00 GB/s")
        self.assertEqual(rows[what][2], "0.79")
        self.assertEqual(rows[what][-1], "**not met**")



class CommandLine(unittest.TestCase):
    def run_main(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = report.main(["report.py"] + list(args))
        return code, out.getvalue(), err.getvalue()

    def test_help_after_a_command_prints_the_usage(self):
        for args in (["--help"], ["table", "--help"], ["compare", "-h"]):
            code, out, _ = self.run_main(*args)
            self.assertEqual(code, 0, args)
            self.assertIn("report.py table", out, args)

    def test_a_missing_file_is_named(self):
        code, _, err = self.run_main("table", "--cpu", "X", "/nonexistent/run.json")
        self.assertEqual(code, 2)
        self.assertIn("/nonexistent/run.json", err)

    def test_a_file_that_is_not_json_is_named(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            f.write("{")
            f.flush()
            code, _, err = self.run_main("compare", f.name, f.name)
        self.assertEqual(code, 2)
        self.assertIn(f.name, err)

    def test_cpu_without_files_is_an_error(self):
        code, _, err = self.run_main("table", "--cpu", "X")
        self.assertEqual(code, 2)
        self.assertIn("--cpu", err)

if __name__ == "__main__":
    unittest.main()
